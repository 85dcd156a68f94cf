"""``parameter_records`` walks the modules once for names, module types and parameters: the
result must be ``named_parameters()`` exactly (order, shared parameters once, None skipped),
on both engines, and a model that defines its own ``named_parameters`` is asked for its names."""
from __future__ import annotations

import pytest

import gradscope as gs
from gradscope.engines import get_engine
from gradscope.monitor.stats import _parameters_with_types, parameter_records


def _library(engine: str):
    return pytest.importorskip("torch") if engine == "torch" else gs


def _model(T):
    class Block(T.nn.Module):
        def __init__(self, shared):
            super().__init__()
            self.shared = shared
            self.own = T.nn.Linear(3, 3)
            self.register_parameter("missing", None)
            self.scale = T.nn.Parameter(T.ones(3))

        def forward(self, x):
            return self.own(self.shared(x)) * self.scale

    class Net(T.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = T.nn.Linear(3, 3)
            self.blocks = T.nn.ModuleList([Block(self.embed), Block(self.embed)])
            self.head = T.nn.Linear(3, 1)
            self.head.bias.requires_grad_(False)
            self.head_again = self.head

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.head(x).sum()

    T.manual_seed(0)
    return Net()


@pytest.mark.parametrize("engine", ["gradscope", "torch"])
def test_the_walk_is_named_parameters_with_module_types(engine):
    T = _library(engine)
    model = _model(T)
    types = {name: type(module).__name__ for name, module in model.named_modules()}
    expected = [(name, types[name.rpartition(".")[0]], parameter) for name, parameter in model.named_parameters()]
    walked = list(_parameters_with_types(model))
    assert [(name, kind) for name, kind, _ in walked] == [(name, kind) for name, kind, _ in expected]
    assert all(a is b for (_, _, a), (_, _, b) in zip(walked, expected))
    model(T.ones(2, 3)).backward()
    records = parameter_records(model, get_engine(engine))
    assert [record.name for record in records] == [name for name, _, p in expected if p.requires_grad]
    assert records[0].module_type == "Linear" and records[2].module_type == "Block"


@pytest.mark.parametrize("engine", ["gradscope", "torch"])
def test_a_model_with_its_own_named_parameters_is_asked(engine):
    T = _library(engine)

    class Renamed(T.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = T.nn.Linear(2, 2)

        def named_parameters(self, *args, **kwargs):
            for name, parameter in super().named_parameters(*args, **kwargs):
                yield name.replace("inner.", "core."), parameter

    names = [name for name, _, _ in _parameters_with_types(Renamed())]
    assert names == ["core.weight", "core.bias"]
