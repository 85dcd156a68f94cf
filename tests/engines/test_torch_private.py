"""Each private torch API of gradscope/engines/torch/private.py does, on the installed torch, what
the adapter relies on: a new torch release that changes one fails here, by name."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gradscope.engines.torch import private  # noqa: E402


def test_foreach_norm_is_each_tensors_2_norm():
    tensors = [torch.tensor([3.0, 4.0]), torch.ones(2, 2, dtype=torch.float64),
               torch.tensor([6.0, 8.0], dtype=torch.bfloat16)]
    norms = private.foreach_norm(tensors[:2])
    assert [float(n) for n in norms] == [5.0, 2.0]
    assert norms[1].dtype == torch.float64
    (low,) = private.foreach_norm(tensors[2:], dtype=torch.float32)
    assert low.dtype == torch.float32 and float(low) == 10.0


def test_foreach_copy_copies_in_place():
    into = [torch.zeros(2), torch.zeros(1, 3)]
    kept = [tensor.data_ptr() for tensor in into]
    private.foreach_copy_(into, [torch.tensor([1.0, 2.0]), torch.full((1, 3), 7.0)])
    assert into[0].tolist() == [1.0, 2.0] and into[1].tolist() == [[7.0, 7.0, 7.0]]
    assert [tensor.data_ptr() for tensor in into] == kept


def test_dispatch_mode_sees_every_operation_and_tree_leaves_its_tensors():
    seen = []

    class Record(private.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            seen.append((str(func), [tuple(t.shape) for t in private.tree_leaves(out) if isinstance(t, torch.Tensor)]))
            return out

    x = torch.ones(2, 3, requires_grad=True)
    with Record():
        torch.log(x).max(dim=1)
    assert seen[0] == ("aten.log.default", [(2, 3)])
    assert seen[1][0] == "aten.max.dim" and seen[1][1] == [(2,), (2,)]


def test_node_sequence_numbers_shapes_and_creation_traceback():
    x = torch.ones(2, 3, requires_grad=True)
    with torch.autograd.set_detect_anomaly(True, check_nan=False):
        y = x.exp()
        z = y.sum(dim=0)
    assert private.node_sequence_nr(z.grad_fn) > private.node_sequence_nr(y.grad_fn)
    assert private.node_output_shapes(y.grad_fn) == ((2, 3),)
    assert private.node_output_shapes(z.grad_fn) == ((3,),)
    trace = private.node_creation_traceback(z.grad_fn)
    assert trace and "test_torch_private.py" in "".join(trace)
    assert private.node_creation_traceback(x.exp().grad_fn) == ()


def test_in_backward_and_callbacks_queued_for_its_end():
    events = []

    def hook(grad):
        events.append(("hook", private.in_backward()))
        private.queue_backward_callback(lambda: events.append(("end", private.in_backward())))
        return grad

    x = torch.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(hook)
    assert not private.in_backward()
    (y * y).sum().backward()
    assert events == [("hook", True), ("end", True)]
    assert not private.in_backward()


def test_compiled_original_is_the_wrapped_module():
    module = torch.nn.Linear(2, 2)
    compiled = torch.compile(module)
    assert private.compiled_original(compiled) is module
    assert private.compiled_original(module) is None


def test_fsdp_param_group_settings_exist(tmp_path):
    """The FSDP2 internals, on a one-rank gloo group (CPU)."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    if dist.is_initialized():
        pytest.skip("a process group is already up in this process")
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
        fully_shard(model)
        (group,) = private.fsdp_param_groups(model)
        for name in private.FSDP_GROUP_SETTINGS:
            value = getattr(group, name)
            setattr(group, name, value)
        assert isinstance(group.reduce_grads, bool) and isinstance(group.all_reduce_grads, bool)
    finally:
        dist.destroy_process_group()


def test_checked_versions_include_the_lowest_declared_one():
    import re
    from pathlib import Path

    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    lowest = re.search(r'torch = \["torch>=([0-9.]+)', pyproject)[1]

    def release(version: str) -> tuple:
        return tuple(int(part) for part in (version.split(".") + ["0", "0"])[:3])

    assert release(private.CHECKED_ON[0]) == release(lowest), \
        "engines/torch/private.py was not reviewed against the lowest declared torch"


def test_to_numpy_leaves_a_cpu_tensor_resizable():
    """numpy() on a tensor's own storage makes it unresizable for good; FSDP2 resizes the storage of
    the parameters it gathers, so the adapter's to_numpy must work on a copy."""
    import torch

    from gradscope.engines import get_engine

    tensor = torch.arange(6.0)
    array = get_engine("torch").to_numpy(tensor)
    assert array.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    tensor.untyped_storage().resize_(0)  # raised "Trying to resize storage that is not resizable"
    assert tensor.untyped_storage().size() == 0
