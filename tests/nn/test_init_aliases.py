"""``nn.init``: torch's whole public surface, the deprecated names old model code calls (they warn
like torch's and fill the same way), and ``sparse_``."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import gradscope as gs
from gradscope.nn import init

_ALIASES = ["uniform", "normal", "constant", "eye", "dirac", "xavier_uniform", "xavier_normal", "kaiming_uniform",
            "kaiming_normal", "orthogonal", "sparse"]


def test_every_public_torch_init_function_exists() -> None:
    torch = pytest.importorskip("torch")
    import inspect
    names = [n for n, v in vars(torch.nn.init).items()
             if not n.startswith("_") and inspect.isfunction(v) and v.__module__ == "torch.nn.init"]
    assert names and [n for n in names if not hasattr(init, n)] == []


def _call(name: str, module: object, tensor: object) -> object:
    extra = {"constant": (0.3,), "sparse": (0.5,)}.get(name.rstrip("_"), ())
    return getattr(module, name)(tensor, *extra)


@pytest.mark.parametrize("name", _ALIASES)
def test_deprecated_alias_warns_like_torch_and_fills_like_the_new_name(name: str) -> None:
    torch = pytest.importorskip("torch")
    shape = (4, 6, 3) if name == "dirac" else (4, 6)
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        gs.manual_seed(3)
        filled = _call(name, init, gs.zeros(*shape))
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        _call(name, torch.nn.init, torch.zeros(*shape))
    assert [(w.category, str(w.message)) for w in ours] == [(w.category, str(w.message)) for w in theirs]
    assert ours[0].filename == __file__
    gs.manual_seed(3)
    expected = _call(name + "_", init, gs.zeros(*shape))
    np.testing.assert_array_equal(filled.numpy(), expected.numpy())


def test_deterministic_aliases_match_torch_values() -> None:
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, shape in (("eye", (3, 5)), ("dirac", (4, 2, 3, 3)), ("constant", (2, 3))):
            np.testing.assert_array_equal(_call(name, init, gs.zeros(*shape)).numpy(),
                                          _call(name, torch.nn.init, torch.zeros(*shape)).numpy())


@pytest.mark.parametrize("rows, sparsity", [(10, 0.1), (10, 0.35), (7, 0.5), (4, 0.0)])
def test_sparse_zeroes_the_same_count_per_column_as_torch(rows: int, sparsity: float) -> None:
    torch = pytest.importorskip("torch")
    ours = init.sparse_(gs.nn.Parameter(gs.ones(rows, 500)), sparsity, std=0.02).detach().numpy()
    theirs = torch.nn.init.sparse_(torch.ones(rows, 500), sparsity, std=0.02).numpy()
    np.testing.assert_array_equal((ours == 0).sum(axis=0), (theirs == 0).sum(axis=0))
    assert (ours == 0).sum(axis=0)[0] == math.ceil(sparsity * rows)
    assert ours[ours != 0].std() == pytest.approx(0.02, rel=0.1)


def test_sparse_is_reproducible_and_needs_two_dims() -> None:
    gs.manual_seed(1)
    first = init.sparse_(gs.zeros(6, 8), 0.5).numpy()
    gs.manual_seed(1)
    np.testing.assert_array_equal(first, init.sparse_(gs.zeros(6, 8), 0.5).numpy())
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions"):
        init.sparse_(gs.zeros(2, 3, 4), 0.5)
