"""``F.embedding_bag`` / ``nn.EmbeddingBag`` against torch: every mode, 1-D input with offsets
(empty bags, include_last_offset), 2-D input, padding_idx, per_sample_weights; values and gradients
of the weight (and of the per-sample weights) in float32 and float64."""
from __future__ import annotations

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")

INPUT = [1, 4, 0, 2, 2, 5, 0, 3]
CASES = [
    dict(mode="mean", offsets=[0, 3, 3, 6]),
    dict(mode="sum", offsets=[0, 2, 5]),
    dict(mode="max", offsets=[0, 3, 3, 6]),
    dict(mode="mean", offsets=[0, 2, 5], padding_idx=0),
    dict(mode="max", offsets=[0, 2, 5], padding_idx=0),
    dict(mode="sum", offsets=[0, 2, 5, 8], include_last_offset=True),
    dict(mode="sum", offsets=[0, 4], per_sample_weights=True),
    dict(mode="mean", offsets=None),
    dict(mode="max", offsets=None, padding_idx=2),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items() if k != "offsets"))
def test_embedding_bag_matches_torch(case: dict, dtype: str) -> None:
    case = dict(case)
    offsets = case.pop("offsets")
    weighted = case.pop("per_sample_weights", False)
    rng = np.random.default_rng(0)
    table = rng.standard_normal((6, 3)).astype(dtype)
    indices = np.array(INPUT) if offsets is not None else np.array(INPUT).reshape(2, 4)
    sample_weights = rng.standard_normal(indices.shape).astype(dtype)
    results = []
    for engine in (torch, gs):
        bag = engine.nn.EmbeddingBag(6, 3, **case).to(getattr(engine, dtype))
        with engine.no_grad():
            bag.weight.copy_(engine.tensor(table))
        psw = engine.tensor(sample_weights, requires_grad=True) if weighted else None
        out = bag(engine.tensor(indices), None if offsets is None else engine.tensor(offsets), per_sample_weights=psw)
        (out * engine.tensor(np.arange(out.numel()).reshape(out.shape).astype(dtype))).sum().backward()
        results.append((out.detach().numpy(), bag.weight.grad.numpy(), None if psw is None else psw.grad.numpy(),
                        repr(bag)))
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    for want, got in zip(results[0][:3], results[1][:3]):
        if want is not None:
            np.testing.assert_allclose(got, want, **tol)
    assert results[1][3] == results[0][3]


def test_embedding_bag_errors_name_the_problem_like_torch() -> None:
    weight = gs.randn(5, 2)
    with pytest.raises(ValueError, match="offsets has to be None"):
        gs.nn.functional.embedding_bag(gs.tensor([[1, 2]]), weight, gs.tensor([0]))
    with pytest.raises(NotImplementedError, match="only supported for mode='sum'"):
        gs.nn.functional.embedding_bag(gs.tensor([1, 2]), weight, gs.tensor([0]), mode="mean",
                                       per_sample_weights=gs.ones(2))
    with pytest.raises(ValueError, match="offsets has to be a 1D Tensor but got None"):
        gs.nn.functional.embedding_bag(gs.tensor([1, 2]), weight)
