"""The per-step collectives of ``gradscope run`` on a one-process gloo group (in this process)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from gradscope.engines.torch_distributed import DistributedTensors, group_ready  # noqa: E402


@pytest.fixture
def group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield DistributedTensors()
    finally:
        if group_ready():
            dist.destroy_process_group()


def test_sum_gather_and_object_gather_on_one_rank(group):
    assert group.sum([1.5, -2.0, 0.0]) == [1.5, -2.0, 0.0]
    assert group.gather([3, 4]) == [[3, 4]]
    assert group.gather([7]) == [[7]]
    origin = {"rank": 0, "module": "encoder.0", "kind": "nan", "text": "x" * 1000}
    assert group.gather_objects(origin) == [origin]


def test_release_waits_for_the_worker_threads_and_tears_down_the_group(group):
    for _ in range(20):
        group.sum([1.0] * 64)
    group.release()
    # nothing gradscope handed to gloo is still held by its worker threads once the process may exit
    assert group._in_flight == ()
    assert not group_ready()
    group.release()  # idempotent once the group is gone
