"""Public-style model code written for PyTorch runs on gradscope after swapping the imports only.

Every file in ``tests/corpus/`` is plain PyTorch code in the style of well-known public examples
(pytorch/examples, the PyTorch tutorials, minGPT/nanoGPT, pygcn/pyGAT, torchvision's ResNet
blocks). Each ends with a few ``corpus_*`` entry points that build the model, the batch and the
loss with the file's own code and run its training loop for a few steps. The harness loads every
file twice, once as written and once with its imports rewritten to gradscope, copies torch's
initial ``state_dict`` into the gradscope model, feeds both the same numpy data and compares:

* the loss and every parameter gradient after one backward pass;
* what the training loop returns (losses, metrics) and every parameter and buffer after it;
* what ``corpus_eval`` returns (evaluation, generation, sampling), where a file has it.

The entry points: ``corpus_model()`` (a module, a dict of modules, or a plain object with
``parameters()``), ``corpus_batch(rng)`` (built from a numpy generator), ``corpus_loss(model, batch)``,
``corpus_train(model, batch)`` and optionally ``corpus_eval(model, batch)``. Module-level settings:
``CORPUS_FLOAT64 = False`` where the code fixes float32, ``CORPUS_TRAIN_MODE = False`` where a fixed
``F.dropout`` rate forces evaluation mode, ``CORPUS_TOLERANCE`` where rounding is amplified (the
reason is written beside it).

Random draws the files make while running (``torch.randn``, ``multinomial``, ``Categorical``
samples, ...) are taken from torch's generators in both runs, so that both engines see the same
numbers (models written as plain classes holding tensors, makemore style, get identical weights
that way); dropout layers run with ``p = 0``, since their masks come from each engine's own
generator.
"""
from __future__ import annotations

import contextlib
import re
import sys
import types
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import gradscope  # noqa: E402

CORPUS = Path(__file__).parent / "corpus"
FILES = sorted(path for path in CORPUS.glob("*.py") if not path.name.startswith("_"))

_IMPORT_RULES = (
    (re.compile(r"^(\s*)import torch$", re.M), r"\1import gradscope as torch"),
    (re.compile(r"^(\s*)import torch\.([\w.]+) as (\w+)$", re.M), r"\1import gradscope.\2 as \3"),
    (re.compile(r"^(\s*)import torch\.([\w.]+)$", re.M), r"\1import gradscope as torch; import gradscope.\2"),
    (re.compile(r"^(\s*)from torch import ", re.M), r"\1from gradscope import "),
    (re.compile(r"^(\s*)from torch\.([\w.]+) import ", re.M), r"\1from gradscope.\2 import "),
)


def swap_imports(source: str) -> str:
    """Rewrite every ``torch`` import of a model file to the same import from gradscope."""
    for pattern, replacement in _IMPORT_RULES:
        source = pattern.sub(replacement, source)
    assert not re.search(r"^\s*(import|from) torch\b", source, re.M), "an import of torch was left"
    return source


def load(path: Path, engine: str) -> types.ModuleType:
    """Execute one corpus file as a fresh module, with its imports swapped for gradscope."""
    source = path.read_text()
    if engine == "gradscope":
        source = swap_imports(source)
    name = f"corpus_{engine}_{path.stem}"
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module  # dataclasses and pickling look the module up
    with pytest.MonkeyPatch.context() as patch:
        context = torch_random_draws(patch) if engine == "gradscope" else contextlib.nullcontext()
        with context:  # a module-level torch.Generator() must be torch's on both engines
            exec(compile(source, str(path), "exec"), module.__dict__)
    if engine == "gradscope":
        assert all(value is not torch for value in vars(module).values())
    return module


# --- random draws from torch's generator on both engines -------------------------------------

def _from_torch(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return gradscope.from_numpy(value.numpy().copy())
    return value


def _to_torch(value: Any) -> Any:
    if isinstance(value, gradscope.Tensor):
        return torch.from_numpy(np.array(value.detach().numpy()))
    if isinstance(value, (tuple, list)):
        return type(value)(_to_torch(item) for item in value)
    return value


def _dtype_to_torch(kwargs: dict) -> dict:
    kwargs = {key: value for key, value in kwargs.items() if key not in ("device", "layout")}
    if not isinstance(kwargs.get("generator"), torch.Generator):
        kwargs.pop("generator", None)
    if "dtype" in kwargs and kwargs["dtype"] is not None:
        kwargs["dtype"] = getattr(torch, str(kwargs["dtype"]).replace("torch.", "").replace("gradscope.", ""))
    return kwargs


def _bridge(name: str) -> Any:
    torch_function = getattr(torch, name)

    def draw(*args: Any, **kwargs: Any) -> Any:
        options = _dtype_to_torch({key: value for key, value in kwargs.items() if key != "requires_grad"})
        result = _from_torch(torch_function(*_to_torch(args), **options))
        if kwargs.get("requires_grad"):
            result.requires_grad_(True)
        return result

    return draw


RANDOM_FUNCTIONS = ("rand", "randn", "rand_like", "randn_like", "randint", "randperm", "multinomial",
                    "bernoulli", "normal")


def _categorical_sample(self: Any, sample_shape: Any = ()) -> Any:
    probs = torch.from_numpy(np.array(self.probs.detach().numpy()))
    return _from_torch(torch.distributions.Categorical(probs=probs).sample(torch.Size(sample_shape)))


def _inplace_bridge(name: str) -> Any:
    def fill(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("generator", None)
        dtype = getattr(torch, str(self.dtype).split(".")[-1])
        drawn = getattr(torch.empty(tuple(self.shape), dtype=dtype), name)(*args, **kwargs)
        with gradscope.no_grad():
            return self.copy_(gradscope.from_numpy(drawn.numpy()))

    return fill


@contextlib.contextmanager
def torch_random_draws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make gradscope's random functions return what torch's generator would."""
    with monkeypatch.context() as patch:
        for name in RANDOM_FUNCTIONS:
            patch.setattr(gradscope, name, _bridge(name))
            patch.setattr(gradscope.ops.creation, name, getattr(gradscope, name))  # reparameterised samples
        patch.setattr(gradscope.distributions.Categorical, "sample", _categorical_sample)
        patch.setattr(gradscope, "Generator", torch.Generator)  # only ever handed to the draws above
        for name in ("normal_", "uniform_", "bernoulli_"):
            patch.setattr(gradscope.Tensor, name, _inplace_bridge(name))
        yield


# --- comparing -------------------------------------------------------------------------------

def _array(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().numpy()
    assert isinstance(value, gradscope.Tensor), f"gradscope gave {type(value).__name__}, torch a tensor"
    return np.asarray(value.detach().numpy())


def assert_same(expected: Any, actual: Any, where: str, rtol: float, atol: float) -> None:
    """Compare nested results of the two runs: tensors, numbers, sequences and dicts."""
    if isinstance(expected, torch.Tensor):
        got = _array(actual)
        want = expected.detach().numpy()
        assert got.shape == want.shape, f"{where}: shape {got.shape} != torch's {want.shape}"
        if want.dtype.kind == "f":
            assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} != torch's {want.dtype}"
            scale = max(1.0, float(np.abs(want).max(initial=0.0)))
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * scale, err_msg=where)
        else:
            np.testing.assert_array_equal(got, want, err_msg=where)
    elif isinstance(expected, dict):
        assert set(actual) == set(expected), f"{where}: keys {sorted(actual)} != {sorted(expected)}"
        for key in expected:
            assert_same(expected[key], actual[key], f"{where}[{key!r}]", rtol, atol)
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{where}: length {len(actual)} != {len(expected)}"
        for index, (want, got) in enumerate(zip(expected, actual)):
            assert_same(want, got, f"{where}[{index}]", rtol, atol)
    elif isinstance(expected, float):
        assert isinstance(actual, float), f"{where}: {type(actual).__name__} where torch gives a float"
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=where)
    else:
        assert type(actual) is type(expected) and actual == expected, f"{where}: {actual!r} != {expected!r}"


def _modules(built: Any) -> dict:
    return dict(built) if isinstance(built, dict) else {"model": built}


def _is_module(model: Any) -> bool:
    return isinstance(model, (torch.nn.Module, gradscope.nn.Module))


def _parameters(model: Any) -> dict:
    """Named parameters of a Module, or the ``parameters()`` list of a hand-written model class
    (makemore style, whose tensors come from the shared random draws)."""
    if _is_module(model):
        return dict(model.named_parameters())
    return {str(index): tensor for index, tensor in enumerate(model.parameters())}


def _state(model: Any) -> dict:
    return dict(model.state_dict()) if _is_module(model) else _parameters(model)


def _copy_state(source: dict, target: dict) -> None:
    for name, module in source.items():
        if not _is_module(module):
            continue
        state = {key: gradscope.from_numpy(value.detach().numpy().copy())
                 for key, value in module.state_dict().items()}
        assert list(state) == list(target[name].state_dict()), f"{name}: state_dict keys differ"
        target[name].load_state_dict(state)


def _silence_dropout(modules: dict) -> None:
    """Dropout layers, recurrent and attention layers' ``dropout`` and models' own rates become 0."""
    for module in filter(_is_module, modules.values()):
        for layer in module.modules():
            if "Dropout" in type(layer).__name__:
                layer.p = 0.0
            for name, value in vars(layer).items():
                if "drop" in name and isinstance(value, float):
                    setattr(layer, name, 0.0)


def _build(files: tuple, monkeypatch: pytest.MonkeyPatch) -> tuple:
    reference, swapped = files
    torch.manual_seed(0)
    torch_models = _modules(reference.corpus_model())
    torch.manual_seed(0)
    with torch_random_draws(monkeypatch):
        gradscope_models = _modules(swapped.corpus_model())
    _copy_state(torch_models, gradscope_models)
    for modules in (torch_models, gradscope_models):
        _silence_dropout(modules)
        if not getattr(reference, "CORPUS_TRAIN_MODE", True):
            for module in filter(_is_module, modules.values()):
                module.eval()
    return torch_models, gradscope_models


def _run(files: tuple, monkeypatch: pytest.MonkeyPatch, entry: str, models: tuple) -> tuple:
    results = []
    for module, built in zip(files, models):
        rng = np.random.default_rng(1234)
        batch = module.corpus_batch(rng)
        torch.manual_seed(1)
        models_arg = built if len(built) > 1 else built["model"]
        context = torch_random_draws(monkeypatch) if module is files[1] else contextlib.nullcontext()
        with context:
            results.append(getattr(module, entry)(models_arg, batch))
    return tuple(results)


DTYPES = {"float32": (torch.float32, gradscope.float32, 2e-4, 2e-5),
          "float64": (torch.float64, gradscope.float64, 1e-8, 1e-10)}


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Tiny models: torch's thread pool costs more than it saves (and the machine is shared)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(params=sorted(DTYPES))
def dtype(request: pytest.FixtureRequest) -> Iterator[tuple]:
    torch_dtype, gradscope_dtype, rtol, atol = DTYPES[request.param]
    previous = torch.get_default_dtype(), gradscope.get_default_dtype()
    torch.set_default_dtype(torch_dtype)
    gradscope.set_default_dtype(gradscope_dtype)
    yield request.param, rtol, atol
    torch.set_default_dtype(previous[0])
    gradscope.set_default_dtype(previous[1])


@pytest.fixture(params=FILES, ids=[path.stem for path in FILES])
def corpus_file(request: pytest.FixtureRequest) -> Iterator[tuple]:
    path = request.param
    files = (load(path, "torch"), load(path, "gradscope"))
    yield files
    for module in files:
        sys.modules.pop(module.__name__, None)
    # a file may call set_default_device at import (the neural style tutorial does); in torch that
    # installs a function mode that turns off fast paths other tests compare against
    torch.set_default_device(None)
    gradscope.set_default_device(None)


def _tolerances(reference: types.ModuleType, dtype: tuple, stage: str) -> tuple:
    name, rtol, atol = dtype
    if name == "float64" and not getattr(reference, "CORPUS_FLOAT64", True):
        pytest.skip("this model is float32 by construction")
    override = getattr(reference, "CORPUS_TOLERANCE", {}).get(stage, 1.0)
    if isinstance(override, dict):  # (rtol, atol) per dtype, where a model amplifies rounding
        return override.get(name, (rtol, atol))
    return rtol * override, atol * override


def test_loss_and_gradients_agree(corpus_file: tuple, dtype: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    rtol, atol = _tolerances(corpus_file[0], dtype, "loss")
    models = _build(corpus_file, monkeypatch)
    for modules in models:
        for module in filter(_is_module, modules.values()):
            module.zero_grad()
    losses = _run(corpus_file, monkeypatch, "corpus_loss", models)
    for loss in losses:
        loss.backward()
    assert_same(losses[0], losses[1], "loss", rtol, atol)
    for name, torch_model in models[0].items():
        torch_grads = {key: p.grad for key, p in _parameters(torch_model).items()}
        gradscope_grads = {key: p.grad for key, p in _parameters(models[1][name]).items()}
        assert list(gradscope_grads) == list(torch_grads)
        for key, grad in torch_grads.items():
            if grad is None:
                assert gradscope_grads[key] is None, f"{name}.{key}: gradscope has a gradient, torch none"
            else:
                assert gradscope_grads[key] is not None, f"{name}.{key}: no gradient on gradscope"
                assert_same(grad, gradscope_grads[key], f"grad {name}.{key}", rtol, atol)


def test_training_loop_agrees(corpus_file: tuple, dtype: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    rtol, atol = _tolerances(corpus_file[0], dtype, "train")
    models = _build(corpus_file, monkeypatch)
    results = _run(corpus_file, monkeypatch, "corpus_train", models)
    assert_same(results[0], results[1], "training loop", rtol, atol)
    for name, torch_model in models[0].items():
        assert_same(_state(torch_model), _state(models[1][name]), f"{name} after training", rtol, atol)


def test_evaluation_agrees(corpus_file: tuple, dtype: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(corpus_file[0], "corpus_eval"):
        pytest.skip("no evaluation code beside this model")
    rtol, atol = _tolerances(corpus_file[0], dtype, "eval")
    models = _build(corpus_file, monkeypatch)
    results = _run(corpus_file, monkeypatch, "corpus_eval", models)
    assert_same(results[0], results[1], "evaluation", rtol, atol)
