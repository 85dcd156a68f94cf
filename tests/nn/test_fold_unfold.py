"""``F.unfold``/``F.fold`` and ``nn.Unfold``/``nn.Fold`` against torch: values and gradients with
kernel, dilation, padding and stride, batched and unbatched, float32 and float64."""
from __future__ import annotations

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")

OPTIONS = [dict(kernel_size=2), dict(kernel_size=(2, 3), stride=2), dict(kernel_size=3, padding=1),
           dict(kernel_size=2, dilation=2, padding=(1, 0), stride=(1, 2))]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("batched", [True, False])
def test_unfold_then_fold_match_torch(options: dict, batched: bool, dtype: str) -> None:
    rng = np.random.default_rng(0)
    image = rng.standard_normal((2, 3, 5, 6) if batched else (3, 5, 6)).astype(dtype)
    results = []
    for engine in (torch, gs):
        x = engine.tensor(image, requires_grad=True)
        blocks = engine.nn.functional.unfold(x, **options)
        image_again = engine.nn.Fold((5, 6), **options)(blocks * 1.5)
        unfolded = engine.nn.Unfold(**options)(x)
        weights = engine.tensor(np.arange(image_again.numel()).reshape(tuple(image_again.shape)).astype(dtype))
        ((image_again * weights).sum() + unfolded.square().sum()).backward()
        results.append([blocks.detach().numpy(), image_again.detach().numpy(), x.grad.numpy()])
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    for want, got in zip(*results):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, **tolerance)


def test_fold_checks_the_block_count_like_torch() -> None:
    with pytest.raises(RuntimeError, match="calculated number of sliding blocks"):
        gs.nn.functional.fold(gs.zeros(1, 4, 5), (3, 3), 2)
    with pytest.raises(RuntimeError, match="divisible by the product of kernel_size"):
        gs.nn.functional.fold(gs.zeros(1, 5, 4), (3, 3), 2)
