"""nn.Module registration, iteration, state dicts, modes, repr and containers, compared with torch."""
from __future__ import annotations

import re
from collections import OrderedDict

import numpy as np
import pytest

import gradscope as gs

W23 = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
B2 = np.array([0.5, -0.5], dtype=np.float32)


def tensor(T, data, requires_grad=False):
    return T.tensor(np.asarray(data, dtype=np.float32), requires_grad=requires_grad)


def affine_cls(T):
    """A Linear-like module built from tensor ops, with an ``extra_repr`` like Linear's."""
    class Affine(T.nn.Module):
        def __init__(self, in_features=3, out_features=2, bias=True):
            super().__init__()
            self.in_features = in_features
            self.out_features = out_features
            weight = np.arange(in_features * out_features, dtype=np.float32).reshape(out_features, in_features)
            self.weight = T.nn.Parameter(T.tensor(weight / 10))
            if bias:
                self.bias = T.nn.Parameter(T.tensor(np.linspace(-1, 1, out_features, dtype=np.float32)))
            else:
                self.register_parameter("bias", None)

        def forward(self, x):
            out = x @ self.weight.t()
            return out if self.bias is None else out + self.bias

        def extra_repr(self):
            return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"

    return Affine


def act_cls(T):
    class Act(T.nn.Module):
        def forward(self, x):
            return T.tanh(x)

    return Act


def stateful_cls(T):
    """Parameters, buffers (one non-persistent) and submodules assigned in interleaved order."""
    Affine = affine_cls(T)

    class Stateful(T.nn.Module):
        def __init__(self):
            super().__init__()
            self.zeta = T.nn.Parameter(tensor(T, [1.0, 2.0]))
            self.register_buffer("running", tensor(T, [0.0, 0.0, 0.0]))
            self.body = Affine(3, 2)
            self.alpha = T.nn.Parameter(tensor(T, [3.0]))
            self.register_buffer("scratch", tensor(T, [9.0]), persistent=False)
            self.head = Affine(2, 1, bias=False)
            self.register_buffer("count", T.tensor(np.array(0, dtype=np.int64)))
            self.plain = 7

        def forward(self, x):
            return self.head(self.body(x) * self.alpha) + self.zeta.sum()

    return Stateful


def names(pairs):
    return [name for name, _ in pairs]


# ---------------------------------------------------------------- registration and iteration
def test_registration_order_and_iteration(compare):
    def run(T, log):
        m = stateful_cls(T)()
        log("params", names(m.named_parameters()))
        log("params no recurse", names(m.named_parameters(recurse=False)))
        log("params prefixed", names(m.named_parameters(prefix="model")))
        log("buffers", names(m.named_buffers()))
        log("buffer values", [b for b in m.buffers()])
        log("children", names(m.named_children()))
        log("modules", names(m.named_modules()))
        log("modules prefixed", names(m.named_modules(prefix="root")))
        log("n params", len(list(m.parameters())))
        log("plain attr", m.plain, "plain" in m.__dict__)
        log("state keys", list(m.state_dict().keys()))
        log("dir has params", all(n in dir(m) for n in ("zeta", "running", "body", "alpha", "head")))

    compare(run)


def test_reassignment_keeps_position_and_delete_removes(compare):
    def run(T, log):
        m = stateful_cls(T)()
        m.zeta = T.nn.Parameter(tensor(T, [5.0, 6.0]))
        m.running = tensor(T, [1.0, 1.0, 1.0])
        m.body = act_cls(T)()
        log("params", names(m.named_parameters()))
        log("buffers", names(m.named_buffers()), m.running)
        log("children", names(m.named_children()))
        m.alpha = None
        log("alpha None", m.alpha is None, names(m.named_parameters()), list(m.state_dict()))
        del m.zeta
        del m.running
        del m.head
        log("after del", names(m.named_parameters()), names(m.named_buffers()), names(m.named_children()))
        log.raises("deleted attr", lambda: m.zeta, "has no attribute")
        m.new_param = T.nn.Parameter(tensor(T, [1.0]))
        m.body = T.nn.Parameter(tensor(T, [2.0]))
        log("module slot becomes param", names(m.named_parameters()), names(m.named_children()))

    compare(run)


def test_named_modules_dotted_paths_and_duplicates(compare):
    def run(T, log):
        Affine, Act = affine_cls(T), act_cls(T)
        shared = Affine(2, 2)
        model = T.nn.Sequential(OrderedDict([
            ("body", T.nn.Sequential(Affine(3, 2), Act(), shared)),
            ("blocks", T.nn.ModuleList([shared, Act(), T.nn.ModuleDict({"proj": Affine(2, 2), "act": Act()})])),
            ("head", shared),
        ]))
        log("modules", names(model.named_modules()))
        log("modules all", names(model.named_modules(remove_duplicate=False)))
        log("params", names(model.named_parameters()))
        log("params all", names(model.named_parameters(remove_duplicate=False)))
        log("n params", len(list(model.parameters())))
        log("children", names(model.named_children()))
        log("state keys", list(model.state_dict()))
        log("type names", [type(m).__name__ for m in model.modules()])

    compare(run)


def test_get_submodule_parameter_buffer(compare):
    def run(T, log):
        Affine = affine_cls(T)
        model = T.nn.Sequential(OrderedDict([("body", T.nn.Sequential(Affine(3, 2))), ("norm", stateful_cls(T)())]))
        log("self", model.get_submodule("") is model)
        log("nested", model.get_submodule("body.0") is model.body[0])
        log("param", model.get_parameter("body.0.bias") is model.body[0].bias)
        log("deep param", model.get_parameter("norm.head.weight") is model.norm.head.weight)
        log("buffer", model.get_buffer("norm.running"))
        log.raises("missing submodule", lambda: model.get_submodule("body.7"), "has no attribute")
        log.raises("not a module", lambda: model.get_submodule("body.0.weight"), "is not an nn.Module")
        log.raises("missing param", lambda: model.get_parameter("body.0.nope"), "has no attribute")
        log.raises("not a param", lambda: model.get_parameter("norm.running"), "is not an nn.Parameter")
        log.raises("not a buffer", lambda: model.get_buffer("norm.zeta"), "is not a buffer")

    compare(run)


# ---------------------------------------------------------------- errors
def test_assigning_before_init_raises(compare):
    def run(T, log):
        class EarlyParam(T.nn.Module):
            def __init__(self):
                self.w = T.nn.Parameter(tensor(T, [1.0]))
                super().__init__()

        class EarlyModule(T.nn.Module):
            def __init__(self):
                self.sub = T.nn.Module()
                super().__init__()

        class EarlyBuffer(T.nn.Module):
            def __init__(self):
                self.register_buffer("b", tensor(T, [1.0]))
                super().__init__()

        class EarlyPlain(T.nn.Module):
            def __init__(self):
                self.x = 3
                super().__init__()

        log.raises("param", EarlyParam, "cannot assign parameters before Module.__init__() call")
        log.raises("module", EarlyModule, "cannot assign module before Module.__init__() call")
        log.raises("buffer", EarlyBuffer, "cannot assign buffer before Module.__init__() call")
        log("plain attribute is fine", EarlyPlain().x)

    compare(run)


def test_wrong_types_and_names_raise(compare):
    def run(T, log):
        m = T.nn.Module()
        m.w = T.nn.Parameter(tensor(T, [1.0]))
        m.sub = T.nn.Module()
        m.register_buffer("buf", tensor(T, [1.0]))

        def assign(name, value):
            return lambda: setattr(m, name, value)

        log.raises("tensor to param slot", assign("w", tensor(T, [1.0])), "as parameter 'w'")
        log.raises("int to module slot", assign("sub", 3), "as child module 'sub'")
        log.raises("int to buffer slot", assign("buf", 3), "as buffer 'buf'")
        log.raises("register plain tensor as param", lambda: m.register_parameter("p", tensor(T, [1.0])),
                   "object to parameter 'p'")
        log.raises("register int as buffer", lambda: m.register_buffer("b", 3), "object to buffer 'b'")
        log.raises("dotted param name", lambda: m.register_parameter("a.b", None), "can't contain \".\"")
        log.raises("empty param name", lambda: m.register_parameter("", None), "can't be empty string")
        log.raises("existing attr", lambda: m.register_parameter("training", None), "already exists")
        log.raises("existing attr buffer", lambda: m.register_buffer("forward", None), "already exists")
        log.raises("non-string buffer name", lambda: m.register_buffer(3, None), "should be a string")
        log.raises("add non-module", lambda: m.add_module("k", 3), "is not a Module subclass")
        log.raises("dotted module name", lambda: m.add_module("a.b", T.nn.Module()), "can't contain \".\"")
        log.raises("empty module name", lambda: m.add_module("", T.nn.Module()), "can't be empty string")
        log.raises("missing attribute", lambda: m.nonexistent, "'Module' object has no attribute 'nonexistent'")
        log.raises("bare forward", lambda: m(tensor(T, [1.0])), "forward")
        log.raises("train non-bool", lambda: m.train("yes"), "training mode is expected to be boolean")
        log("state unchanged", names(m.named_parameters()), names(m.named_buffers()), names(m.named_children()))
        log("None allowed", [m.register_parameter("empty", None), m.register_buffer("nobuf", None),
                             m.add_module("nomod", None)])
        log("None slots skipped", names(m.named_parameters()), names(m.named_buffers()), names(m.named_modules()))

    compare(run)


# ---------------------------------------------------------------- state dict
def test_state_dict_contents(compare):
    def run(T, log):
        m = stateful_cls(T)()
        sd = m.state_dict()
        log("type", type(sd).__name__)
        log("keys", list(sd))
        log("values", list(sd.values()))
        log("detached", [v.requires_grad for v in sd.values()])
        log("shares memory", sd["zeta"].data_ptr() == m.zeta.data_ptr() if hasattr(sd["zeta"], "data_ptr")
            else np.shares_memory(sd["zeta"].numpy(), m.zeta.detach().numpy()))
        kept = m.state_dict(keep_vars=True)
        log("keep_vars", kept["zeta"] is m.zeta, kept["body.bias"].requires_grad)
        log("prefix", list(m.state_dict(prefix="net."))[:3])

    compare(run)


def test_load_state_dict_roundtrip_and_errors(compare):
    def run(T, log):
        source, target = stateful_cls(T)(), stateful_cls(T)()
        with T.no_grad():
            for p in source.parameters():
                p.mul_(-2.0)
            source.running.add_(3.0)
        result = target.load_state_dict(source.state_dict())
        log("result", list(result.missing_keys), list(result.unexpected_keys), repr(result))
        log("loaded", list(target.state_dict().values()))
        log("still parameters", [type(p).__name__ for p in target.parameters()])

        sd = source.state_dict()
        missing = OrderedDict((k, v) for k, v in sd.items() if k != "body.weight")
        log.raises("missing strict", lambda: target.load_state_dict(missing), "Missing key(s) in state_dict")
        log.raises("missing strict names key", lambda: target.load_state_dict(missing), '"body.weight"')
        unexpected = OrderedDict(sd)
        unexpected["body.extra"] = tensor(T, [1.0])
        unexpected["ghost.weight"] = tensor(T, [1.0])
        log.raises("unexpected strict", lambda: target.load_state_dict(unexpected),
                   "Unexpected key(s) in state_dict")
        log.raises("unexpected names key", lambda: target.load_state_dict(unexpected), '"ghost.weight"')
        log.raises("names module class", lambda: target.load_state_dict(unexpected),
                   "Error(s) in loading state_dict for Stateful")
        wrong = OrderedDict(sd)
        wrong["body.weight"] = tensor(T, np.zeros((3, 3)))
        log.raises("size mismatch", lambda: target.load_state_dict(wrong), "size mismatch for body.weight")
        log.raises("size mismatch even when not strict", lambda: target.load_state_dict(wrong, strict=False),
                   "size mismatch for body.weight")

        both = OrderedDict((k, v) for k, v in unexpected.items() if k != "alpha")
        with T.no_grad():
            target.alpha.fill_(42.0)
        result = target.load_state_dict(both, strict=False)
        log("non-strict", list(result.missing_keys), list(result.unexpected_keys))
        log("non-strict loads the rest", target.alpha, target.body.weight)
        log("all matched repr", repr(target.load_state_dict(sd, strict=False)))

    compare(run)


def test_load_state_dict_rejects_non_dict_and_dtype_conversion(compare):
    def run(T, log):
        m = stateful_cls(T)()
        log.raises("non-dict", lambda: m.load_state_dict([("zeta", tensor(T, [1.0, 1.0]))]),
                   "Expected state_dict to be dict-like")
        log("double returns self", m.double() is m, [str(p.dtype).split(".")[-1] for p in m.parameters()],
            [str(b.dtype).split(".")[-1] for b in m.buffers()])
        m.load_state_dict(stateful_cls(T)().state_dict())
        log("loaded values keep the module's dtype", [str(p.dtype).split(".")[-1] for p in m.parameters()])
        log("float", [str(p.dtype).split(".")[-1] for p in m.float().parameters()])

    compare(run)


def test_state_dict_moves_between_backends():
    torch = pytest.importorskip("torch")
    ours, theirs = stateful_cls(gs)(), stateful_cls(torch)()
    with torch.no_grad():
        for p in theirs.parameters():
            p.mul_(3.0)
    ours.load_state_dict({k: gs.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    x = np.array([[1.0, -1.0, 0.5]], dtype=np.float32)
    np.testing.assert_allclose(ours(gs.tensor(x)).detach().numpy(), theirs(torch.tensor(x)).detach().numpy(),
                               rtol=1e-6)


# ---------------------------------------------------------------- grads, modes, apply
def test_zero_grad_and_requires_grad(compare):
    def run(T, log):
        m = stateful_cls(T)()
        x = tensor(T, [[1.0, 2.0, 3.0]])
        m(x).sum().backward()
        log("grads", [p.grad for p in m.parameters()])
        m(x).sum().backward()
        log("accumulated", [p.grad for p in m.parameters()])
        m.zero_grad(set_to_none=False)
        log("zeros", [p.grad for p in m.parameters()])
        m.zero_grad()
        log("none", [p.grad is None for p in m.parameters()])
        log("returns self", m.requires_grad_(False) is m, [p.requires_grad for p in m.parameters()])
        m.body.requires_grad_()
        log("partial", [(n, p.requires_grad) for n, p in m.named_parameters()])
        m(x).sum().backward()
        log("only body grads", [(n, p.grad is None) for n, p in m.named_parameters()])

    compare(run)


def test_train_eval_and_apply(compare):
    def run(T, log):
        Affine, Act = affine_cls(T), act_cls(T)
        model = T.nn.Sequential(Affine(3, 2), T.nn.Sequential(Act(), Affine(2, 2)), T.nn.ModuleList([Act()]))
        log("default", [m.training for m in model.modules()])
        log("eval returns self", model.eval() is model, [m.training for m in model.modules()])
        model[1].train()
        log("sub train", [m.training for m in model.modules()])
        log("train(False)", model.train(False) is model, [m.training for m in model.modules()])
        model.train()
        visited = []
        log("apply returns self", model.apply(lambda m: visited.append(type(m).__name__)) is model)
        log("apply order", visited)

        def init(m):
            if isinstance(m, Affine):
                with T.no_grad():
                    m.weight.fill_(0.25)

        model.apply(init)
        log("applied", [p for p in model.parameters()])

    compare(run)


# ---------------------------------------------------------------- repr
def normalise(text: str) -> str:
    return re.sub(r"\btorch\b", "gradscope", text)


def test_repr_of_nested_containers_matches_torch():
    torch = pytest.importorskip("torch")

    def build(T):
        Affine, Act = affine_cls(T), act_cls(T)

        class Multi(T.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = Act()

            def extra_repr(self):
                return "first line\nsecond line"

        class OneLine(T.nn.Module):
            def extra_repr(self):
                return "k=3"

        return T.nn.Sequential(OrderedDict([
            ("encoder", T.nn.Sequential(Affine(3, 2), Act(), T.nn.Identity())),
            ("blocks", T.nn.ModuleList([Multi(), OneLine(), T.nn.ModuleList()])),
            ("heads", T.nn.ModuleDict({"b": Affine(2, 1, bias=False), "a": T.nn.Flatten()})),
            ("unflat", T.nn.Unflatten(1, (2, 1))),
            ("empty", T.nn.Sequential()),
            ("flat", T.nn.Flatten(0, 1)),
        ]))

    assert repr(build(gs)) == normalise(repr(build(torch)))
    assert repr(gs.nn.Module()) == repr(torch.nn.Module()) == "Module()"


def test_repr_of_parameter_containers_matches_torch():
    torch = pytest.importorskip("torch")

    def build(T):
        return T.nn.Sequential(
            T.nn.ParameterList([T.nn.Parameter(T.tensor(W23)), T.nn.Parameter(T.tensor(B2))]),
            T.nn.ParameterDict({"scale": T.nn.Parameter(T.tensor(B2))}),
        )

    assert repr(build(gs)) == normalise(repr(build(torch)))


def test_repr_and_state_dict_keys_of_real_layers_match_torch():
    torch = pytest.importorskip("torch")

    def build(T):
        nn = T.nn
        return nn.Sequential(OrderedDict([
            ("features", nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=True),
                                       nn.MaxPool2d(2))),
            ("flatten", nn.Flatten()),
            ("heads", nn.ModuleDict({"cls": nn.Sequential(nn.Linear(16, 8), nn.Dropout(0.25), nn.Linear(8, 2)),
                                     "norm": nn.LayerNorm(16)})),
            ("rnn", nn.ModuleList([nn.GRU(4, 3, batch_first=True)])),
        ]))

    ours, theirs = build(gs), build(torch)
    assert repr(ours) == normalise(repr(theirs))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]


def test_parameter_basics(compare):
    def run(T, log):
        p = T.nn.Parameter(tensor(T, [1.0, 2.0]))
        log("flags", p.requires_grad, p.is_leaf, p.grad_fn is None, type(p).__name__)
        frozen = T.nn.Parameter(tensor(T, [1.0]), requires_grad=False)
        log("frozen", frozen.requires_grad)
        log("is tensor", isinstance(p, T.Tensor))
        log("repr head", repr(p).split("\n")[0])
        q = p * 2
        log("op result is not a Parameter", type(q).__name__ == "Parameter", q.requires_grad)

    compare(run)


# ---------------------------------------------------------------- containers
def test_sequential_indexing_slicing_and_mutation(compare):
    def run(T, log):
        Affine, Act = affine_cls(T), act_cls(T)
        a, b, c = Affine(3, 2), Act(), Affine(2, 2)
        seq = T.nn.Sequential(a, b, c)
        log("len", len(seq), "index", seq[0] is a, seq[-1] is c, seq[1] is b)
        log.raises("index out of range", lambda: seq[3], "out of range")
        head = seq[1:]
        log("slice", type(head).__name__, names(head.named_children()), head[0] is b)
        log("iter", [m is n for m, n in zip(seq, (a, b, c))])
        x = tensor(T, [[1.0, 2.0, 3.0]])
        log("forward", seq(x), c(b(a(x))))
        d = Act()
        log("append returns self", seq.append(d) is seq, names(seq.named_children()), seq[3] is d)
        seq[1] = Act()
        log("setitem", seq[1] is b, names(seq.named_children()))
        del seq[0]
        log("delitem renumbers", names(seq.named_children()), seq[0].__class__.__name__)
        popped = seq.pop(0)
        log("pop", popped.__class__.__name__, len(seq))
        seq.insert(0, a)
        log("insert", names(seq.named_children()), seq[0] is a)
        seq.extend([Act(), Act()])
        log("extend", len(seq))
        joined = T.nn.Sequential(a) + T.nn.Sequential(b, c)
        log("add", type(joined).__name__, len(joined), joined[2] is c)
        log("params", names(seq.named_parameters()))

    compare(run)


def test_sequential_from_ordered_dict(compare):
    def run(T, log):
        Affine, Act = affine_cls(T), act_cls(T)
        seq = T.nn.Sequential(OrderedDict([("fc", Affine(3, 2)), ("act", Act()), ("out", Affine(2, 1))]))
        log("children", names(seq.named_children()))
        log("attribute", seq.fc is seq[0], seq.out is seq[-1])
        log("params", names(seq.named_parameters()))
        log("slice keeps names", names(seq[1:].named_children()))
        seq.append(Act())
        log("append after named", names(seq.named_children()))
        log("forward", seq(tensor(T, [[1.0, 0.0, -1.0]])))

    compare(run)


def test_module_list(compare):
    def run(T, log):
        Affine, Act = affine_cls(T), act_cls(T)
        layers = T.nn.ModuleList([Affine(3, 2), Act()])
        layers.append(Affine(2, 2))
        layers.extend([Act()])
        layers += [Affine(2, 1)]
        layers.insert(1, Act())
        log("names", names(layers.named_children()), len(layers))
        log("types", [type(m).__name__ for m in layers])
        log("negative index", layers[-1] is list(layers)[-1])
        log("slice", type(layers[1:3]).__name__, len(layers[1:3]))
        layers[0] = Act()
        del layers[1]
        log("after set/del", names(layers.named_children()), [type(m).__name__ for m in layers])
        log("params", names(layers.named_parameters()))
        log.raises("out of range", lambda: layers[10], "out of range")
        x = tensor(T, [[1.0, 2.0]])
        for layer in layers[2:]:
            x = layer(x)
        log("forward", x)

    compare(run)


def test_module_list_concatenation(compare):
    def run(T, log):
        Affine, Act = affine_cls(T), act_cls(T)
        joined = T.nn.ModuleList([Act()]) + T.nn.ModuleList([Affine(3, 2)])
        log("add", type(joined).__name__, names(joined.named_children()), names(joined.named_parameters()))

    compare(run)


def test_module_dict(compare):
    def run(T, log):
        Affine, Act = affine_cls(T), act_cls(T)
        heads = T.nn.ModuleDict({"z": Affine(3, 1), "a": Act()})
        heads["m"] = Affine(3, 2)
        heads.update([("b", Act())])
        heads.update({"c": Act()})
        log("keys keep insertion order", list(heads.keys()), len(heads))
        log("contains", "m" in heads, "nope" in heads)
        log("values", [type(m).__name__ for m in heads.values()])
        log("items", [k for k, _ in heads.items()])
        log("iter", list(heads))
        popped = heads.pop("a")
        del heads["b"]
        log("after pop/del", type(popped).__name__, list(heads), names(heads.named_modules()))
        log("params", names(heads.named_parameters()))
        heads.clear()
        log("cleared", len(heads), names(heads.named_children()))

    compare(run)


def test_parameter_list_and_dict(compare):
    def run(T, log):
        plist = T.nn.ParameterList([T.nn.Parameter(tensor(T, [1.0])), tensor(T, [2.0, 3.0])])
        plist.append(T.nn.Parameter(tensor(T, [4.0])))
        plist.extend([tensor(T, [5.0])])
        log("len", len(plist), names(plist.named_parameters()))
        log("converted to parameters", [type(p).__name__ for p in plist], [p.requires_grad for p in plist])
        log("values", list(plist), plist[-1])
        pdict = T.nn.ParameterDict({"w": T.nn.Parameter(tensor(T, [1.0])), "b": tensor(T, [2.0])})
        pdict["c"] = tensor(T, [3.0])
        pdict.update({"d": T.nn.Parameter(tensor(T, [4.0]))})
        log("dict keys", list(pdict.keys()), len(pdict), "c" in pdict)
        log("dict params", names(pdict.named_parameters()), [type(p).__name__ for p in pdict.values()])
        del pdict["w"]
        log("after del", list(pdict), names(pdict.named_parameters()))

        class Holder(T.nn.Module):
            def __init__(self):
                super().__init__()
                self.plist = plist
                self.pdict = pdict

            def forward(self):
                return sum(p.sum() for p in self.plist) + sum(p.sum() for p in self.pdict.values())

        holder = Holder()
        log("nested names", names(holder.named_parameters()), list(holder.state_dict()))
        holder().backward()
        log("grads", [p.grad for p in holder.parameters()])

    compare(run)
