"""Hogwild on gradscope: ``model.share_memory()`` puts parameters in shared memory, and in-place
optimizer steps taken in forked processes reach the parent, as with ``torch.multiprocessing``."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import gradscope as gs
import gradscope.multiprocessing as gs_mp

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="relies on fork")


def _train(rank: int, model: gs.nn.Module) -> None:
    optimizer = gs.optim.SGD(model.parameters(), lr=0.5)
    model(gs.ones(1, 2)).sum().backward()
    optimizer.step()


def _spawned(rank: int, queue: object) -> None:
    queue.put(rank * 10)


def test_forked_workers_update_shared_parameters() -> None:
    gs.manual_seed(0)
    model = gs.nn.Linear(2, 1)
    assert not model.weight.is_shared()
    before = model.weight.detach().numpy().copy()
    model.share_memory()
    assert model.weight.is_shared() and model.bias.is_shared()
    np.testing.assert_array_equal(model.weight.detach().numpy(), before)
    context = gs_mp.get_context("fork")
    workers = [context.Process(target=_train, args=(rank, model)) for rank in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert [worker.exitcode for worker in workers] == [0, 0]
    # each worker took one SGD step with gradient 1 on every weight (input of ones)
    np.testing.assert_allclose(model.weight.detach().numpy(), before - 2 * 0.5)


def test_spawn_runs_every_rank_and_reports_failures() -> None:
    queue = gs_mp.get_context("fork").SimpleQueue()
    gs_mp.spawn(_spawned, args=(queue,), nprocs=3, start_method="fork")
    assert sorted(queue.get() for _ in range(3)) == [0, 10, 20]
    with pytest.raises(gs_mp.ProcessRaisedException, match="exit code"):
        gs_mp.spawn(_train, args=(None,), nprocs=1, start_method="fork")
    gs_mp.set_sharing_strategy("file_system")
    assert gs_mp.get_sharing_strategy() == "file_system"
    gs_mp.set_sharing_strategy("file_descriptor")
