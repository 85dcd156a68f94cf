"""The per-step collectives of ``gradscope run`` on a one-process gloo group (in this process)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from gradscope.engines.torch.distributed import DistributedTensors, group_ready  # noqa: E402


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


def test_end_of_run_parameter_check_names_the_rank(group):
    from gradscope.engines import get_engine
    from gradscope.monitor.distributed import DistributedReducer
    from gradscope.monitor.run import RunOptions

    reducer = DistributedReducer(rank=0, world_size=1)
    engine = get_engine("torch")
    weight = torch.nn.Parameter(torch.tensor([1.0, float("inf")]))
    finite = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight, finite], lr=0.1)
    origin = reducer.parameter_origin(engine, [("0.bias", finite), ("1.weight", weight)], optimizer, 4,
                                      RunOptions(inf=True))
    assert (origin.rank, origin.step, origin.phase, origin.module, origin.node, origin.kind) == \
        (0, 4, "update", "1", "SGD.step", "inf")
    assert reducer.collectives == 1
    assert reducer.parameter_origin(engine, [("0.bias", finite)], optimizer, 4, RunOptions(inf=True)) is None
    assert reducer.parameter_origin(engine, [("1.weight", weight)], optimizer, 4, RunOptions(nan=True)) is None


def test_a_model_wrapped_in_fsdp_v1_is_not_re_run_on_one_rank(monkeypatch):
    """FSDP (v1) needs an accelerator, so its class is stood in for: a model containing it must
    not be called again on one rank (its forward would wait on the others' all-gather)."""
    import types

    import torch.distributed.fsdp as fsdp

    from gradscope.monitor.distributed import PHASE_GRADIENT, PHASE_LOSS, _origin_without_rerun

    class StandIn(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

    plain = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Tanh())
    assert DistributedTensors.rerun_is_local([plain])
    monkeypatch.setattr(fsdp, "FullyShardedDataParallel", StandIn)
    assert DistributedTensors.rerun_is_local([plain])
    assert not DistributedTensors.rerun_is_local([torch.nn.Sequential(StandIn(torch.nn.Linear(2, 2)))])

    monitor = types.SimpleNamespace(parameters=[("0.inner.weight", None), ("1.bias", None)])
    origin = _origin_without_rerun(monitor, (PHASE_GRADIENT, 1, 2), step=4)
    assert (origin.step, origin.phase, origin.module, origin.node, origin.kind) == (4, "backward", "1", None, "inf")
    assert "1.bias" in origin.detail and "FSDP (v1)" in origin.detail
    origin = _origin_without_rerun(monitor, (PHASE_LOSS, 0, 1), step=0)
    assert (origin.phase, origin.module, origin.kind) == ("forward", None, "nan")
