"""``utils.data``, ``amp`` and the small tensor-surface pieces model scripts touch, against torch:
DataLoader batches and collation, samplers, splits, disabled mixed precision without CUDA,
``f"{loss:.3f}"``, ``bfloat16`` and the default device."""
from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest

import gradscope as gs
import gradscope.utils.data as gs_data

torch = pytest.importorskip("torch")
import torch.utils.data as torch_data  # noqa: E402


def _same(expected: object, actual: object) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, gs.Tensor)
        assert str(actual.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1]
        np.testing.assert_array_equal(actual.numpy(), expected.numpy())
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            _same(expected[key], actual[key])
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected) and len(actual) == len(expected)
        for want, got in zip(expected, actual):
            _same(want, got)
    elif isinstance(expected, np.ndarray):
        np.testing.assert_array_equal(actual, expected)
    else:
        assert actual == expected


Pair = collections.namedtuple("Pair", "x y")


class Samples:
    """A map-style dataset of mixed samples, written once for both engines."""

    def __init__(self, engine: object, base: type) -> None:
        self.engine, self.rows = engine, np.arange(14, dtype=np.float32).reshape(7, 2)
        self.__class__ = type("Samples", (Samples, base), {})

    def __len__(self) -> int:
        return 7

    def __getitem__(self, index: int) -> dict:
        return {"tensor": self.engine.tensor(self.rows[index]), "array": self.rows[index] * 2,
                "int": index, "float": index / 2, "name": f"s{index}", "pair": Pair(index, [index, -index])}


@pytest.mark.parametrize("options", [dict(batch_size=3), dict(batch_size=3, drop_last=True),
                                     dict(batch_size=None), dict(batch_size=2, collate_fn=lambda batch: batch)])
def test_dataloader_batches_and_collates_like_torch(options: dict) -> None:
    expected = list(torch_data.DataLoader(Samples(torch, torch_data.Dataset), **options))
    actual = list(gs_data.DataLoader(Samples(gs, gs_data.Dataset), **options))
    assert len(gs_data.DataLoader(Samples(gs, gs_data.Dataset), **options)) == len(expected)
    _same(expected, actual)


def test_tensor_dataset_subset_concat_and_batch_sampler() -> None:
    x = np.arange(10, dtype=np.float64).reshape(5, 2)
    y = np.arange(5)
    reference = torch_data.TensorDataset(torch.tensor(x), torch.tensor(y))
    dataset = gs_data.TensorDataset(gs.tensor(x), gs.tensor(y))
    _same(reference[2], dataset[2])
    _same(torch_data.Subset(reference, [4, 0])[1], gs_data.Subset(dataset, [4, 0])[1])
    _same((reference + reference)[7], (dataset + dataset)[7])
    sampler = list(torch_data.BatchSampler(torch_data.SequentialSampler(range(7)), 3, False))
    assert list(gs_data.BatchSampler(gs_data.SequentialSampler(range(7)), 3, False)) == sampler
    loader = gs_data.DataLoader(dataset, batch_size=2, shuffle=True, generator=gs.Generator().manual_seed(0))
    rows = sorted(row for xb, _ in loader for row in xb[:, 0].tolist())
    assert rows == [0.0, 2.0, 4.0, 6.0, 8.0]
    with pytest.raises(AssertionError, match="Size mismatch between tensors"):
        gs_data.TensorDataset(gs.zeros(3), gs.zeros(4))


def test_random_split_and_samplers_cover_every_index_once() -> None:
    parts = gs_data.random_split(range(10), [0.5, 0.3, 0.2], generator=gs.Generator().manual_seed(1))
    assert [len(p) for p in parts] == [len(p) for p in torch_data.random_split(range(10), [0.5, 0.3, 0.2])]
    assert sorted(i for part in parts for i in part) == list(range(10))
    assert sorted(gs_data.RandomSampler(range(6))) == list(range(6))
    assert sorted(gs_data.SubsetRandomSampler([3, 5, 9])) == [3, 5, 9]
    with pytest.raises(ValueError, match="Sum of input lengths does not equal"):
        gs_data.random_split(range(5), [2, 2])
    with pytest.raises(ValueError, match="sampler option is mutually exclusive with shuffle"):
        gs_data.DataLoader(range(4), sampler=[0, 1], shuffle=True)


def test_iterable_dataset_batches_like_torch() -> None:
    def stream(engine: object, base: type) -> object:
        class Stream(base):
            def __iter__(self):
                return iter(engine.tensor([float(i)]) for i in range(5))
        return Stream()

    _same(list(torch_data.DataLoader(stream(torch, torch_data.IterableDataset), batch_size=2)),
          list(gs_data.DataLoader(stream(gs, gs_data.IterableDataset), batch_size=2)))
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        gs_data.DataLoader(stream(gs, gs_data.IterableDataset), shuffle=True)


def test_grad_scaler_and_autocast_are_disabled_without_cuda_as_in_torch() -> None:
    model = gs.nn.Linear(2, 1)
    optimizer = gs.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning, match="CUDA is not available"):
        scaler = gs.cuda.amp.GradScaler()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert scaler.is_enabled() == torch.cuda.amp.GradScaler().is_enabled() is False
    assert gs.amp.GradScaler("cuda", enabled=False).is_enabled() is False
    loss = model(gs.ones(1, 2)).sum()
    assert scaler.scale(loss) is loss
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    before = model.weight.detach().clone()
    scaler.step(optimizer)
    scaler.update()
    np.testing.assert_allclose(model.weight.detach().numpy(), before.numpy() - 0.1)
    assert scaler.get_scale() == 1.0 and scaler.state_dict() == {}
    with pytest.warns(UserWarning, match="Disabling"):
        context = gs.autocast(device_type="cuda", dtype=gs.float16)
    with context:
        pass
    with gs.amp.autocast("cpu", enabled=False):
        pass
    with pytest.raises(NotImplementedError, match="bfloat16"):
        with gs.amp.autocast("cpu", dtype=gs.bfloat16):
            pass


def test_format_bfloat16_and_default_device() -> None:
    for value in (2.5, 3):
        assert f"{gs.tensor(value):.3f}" == f"{torch.tensor(value):.3f}"
        assert f"{gs.tensor(value)}" == f"{torch.tensor(value)}"
    assert f"{gs.tensor([2.5])}" == f"{gs.tensor([2.5])!s}"
    with pytest.raises(TypeError):
        f"{gs.tensor([1.0, 2.0]):.2f}"
    with pytest.raises(TypeError):
        f"{torch.tensor([1.0, 2.0]):.2f}"
    dtypes = {"bfloat16": gs.bfloat16, "float32": gs.float32}
    assert dtypes["bfloat16"] is gs.bfloat16 and gs.bfloat16.is_floating_point and gs.bfloat16.itemsize == 2
    with pytest.raises(TypeError, match="no bfloat16"):
        gs.zeros(2, dtype=gs.bfloat16)
    assert gs.cuda.is_bf16_supported() is torch.cuda.is_bf16_supported() is False
    gs.set_default_device("cpu")
    assert str(gs.get_default_device()) == str(torch.get_default_device()) == "cpu"
    with pytest.raises(RuntimeError, match="CPU only"):
        gs.set_default_device("cuda")


def test_memory_formats_are_accepted_and_change_no_value() -> None:
    x = gs.arange(12.0).view(1, 3, 2, 2)
    moved = x.to(memory_format=gs.channels_last)
    np.testing.assert_array_equal(moved.numpy(), x.numpy())
    layer = gs.nn.Conv2d(3, 2, 1).to(memory_format=gs.channels_last)
    np.testing.assert_array_equal(layer(moved).detach().numpy(), layer(x).detach().numpy())
    assert repr(gs.channels_last) == "gradscope.channels_last"
    assert all(isinstance(f, gs.memory_format) for f in (gs.contiguous_format, gs.preserve_format,
                                                          gs.channels_last_3d))
