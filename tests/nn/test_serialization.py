"""gs.save / gs.load: .npz without pickle, round trips, torch-exported weights, and refusals."""
from __future__ import annotations

import io
import json
import math
import zipfile
from pathlib import Path
from collections import OrderedDict

import numpy as np
import pytest

import gradscope as gs
from gradscope import nn, optim
from gradscope.serialization import NotAGradscopeFileError, UnsupportedValueError, load, save


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(gs.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)))
        self.register_buffer("count", gs.tensor(3))
        self.inner = nn.Module()
        self.inner.b = nn.Parameter(gs.tensor([0.5, -1.5], dtype=gs.float64))


def test_state_dict_round_trip(tmp_path):
    model = Tiny()
    path = tmp_path / "model.weights"
    save(model.state_dict(), path)
    assert path.exists() and not (tmp_path / "model.weights.npz").exists()
    loaded = load(path)
    assert isinstance(loaded, OrderedDict)
    assert list(loaded) == ["w", "count", "inner.b"]
    for key, value in model.state_dict().items():
        assert loaded[key].dtype == value.dtype and loaded[key].shape == value.shape
        np.testing.assert_array_equal(loaded[key]._data, value._data)
        assert not loaded[key].requires_grad
    other = Tiny()
    with gs.no_grad():
        for p in other.parameters():
            p.zero_()
    other.load_state_dict(loaded)
    np.testing.assert_array_equal(other.w._data, model.w._data)


def test_file_is_a_plain_npz_readable_by_numpy(tmp_path):
    path = tmp_path / "m.npz"
    save(Tiny().state_dict(), str(path))
    with np.load(path, allow_pickle=False) as npz:
        assert set(npz.files) == {"w", "count", "inner.b", "__gradscope__"}
        np.testing.assert_array_equal(npz["w"], np.arange(6).reshape(2, 3))
        header = json.loads(bytes(npz["__gradscope__"]).decode())
    assert header["format"] == "gradscope" and header["version"] == 1


def test_nested_tree_with_every_supported_value(tmp_path):
    obj = {
        "ints": [1, -2, 10 ** 20], "floats": (0.5, float("inf"), -float("inf"), float("nan")),
        "flags": {True: None, 3: "three", 2.5: "x", ("a", 1): [1, 2]},
        "array": np.arange(4, dtype=np.uint16), "scalar": np.float64(2.5),
        "tensor": gs.tensor([[True, False]]), "empty": gs.zeros(0, 3),
        "param": nn.Parameter(gs.ones(2)), "leaf": gs.ones(2, requires_grad=True),
        "ordered": OrderedDict([("z", 1), ("a", 2)]),
    }
    path = tmp_path / "tree.npz"
    save(obj, path)
    back = load(path)
    assert list(back) == list(obj)
    assert back["ints"] == [1, -2, 10 ** 20]
    assert back["floats"][:3] == (0.5, math.inf, -math.inf) and math.isnan(back["floats"][3])
    assert back["flags"] == {True: None, 3: "three", 2.5: "x", ("a", 1): [1, 2]}
    assert back["array"].dtype == np.uint16 and back["array"].tolist() == [0, 1, 2, 3]
    assert back["scalar"] == 2.5 and isinstance(back["scalar"], np.float64)
    assert back["tensor"].dtype == gs.bool and back["tensor"].tolist() == [[True, False]]
    assert back["empty"].shape == (0, 3)
    assert isinstance(back["param"], nn.Parameter) and back["param"].requires_grad
    assert back["leaf"].requires_grad and not isinstance(back["leaf"], nn.Parameter)
    assert isinstance(back["ordered"], OrderedDict) and list(back["ordered"]) == ["z", "a"]
    assert type(back) is dict


def test_file_objects():
    buffer = io.BytesIO()
    save({"a": gs.ones(2)}, buffer)
    buffer.seek(0)
    assert load(buffer)["a"].tolist() == [1.0, 1.0]


def test_optimizer_state_dict_round_trip(tmp_path):
    params = [nn.Parameter(gs.tensor([1.0, -2.0])), nn.Parameter(gs.tensor([[0.5]]))]
    opt = optim.Adam(params, lr=0.01, amsgrad=True)
    for _ in range(3):
        opt.zero_grad()
        ((params[0] ** 2).sum() + (params[1] * 3).sum()).backward()
        opt.step()
    path = tmp_path / "opt.npz"
    save(opt.state_dict(), path)
    loaded = load(path)
    assert list(loaded["state"]) == [0, 1]
    assert loaded["param_groups"][0]["betas"] == (0.9, 0.999)
    assert loaded["param_groups"][0]["foreach"] is None
    copies = [nn.Parameter(gs.tensor(p._data.copy())) for p in params]
    opt2 = optim.Adam(copies, lr=0.5, amsgrad=True)
    opt2.load_state_dict(loaded)
    for o, ps in ((opt, params), (opt2, copies)):
        o.zero_grad()
        ((ps[0] ** 2).sum() + (ps[1] * 3).sum()).backward()
        o.step()
    for p, q in zip(params, copies):
        np.testing.assert_array_equal(p._data, q._data)


def test_names_that_cannot_be_member_names_fall_back(tmp_path):
    obj = {"": gs.ones(1), "__x": gs.ones(2), "a/b": gs.ones(3), "a": {"b": gs.ones(4)}, "a.b": gs.ones(5)}
    save(obj, tmp_path / "f.npz")
    back = load(tmp_path / "f.npz")
    assert list(back) == list(obj)
    assert [back[k].shape[0] for k in ("", "__x", "a/b", "a.b")] == [1, 2, 3, 5]
    assert back["a"]["b"].shape[0] == 4
    with np.load(tmp_path / "f.npz") as npz:
        assert "a.b" in npz.files and sum(name.startswith("__array_") for name in npz.files) == 4


@pytest.mark.parametrize("value,kind", [(object(), "object"), ({"f": lambda x: x}, "function"),
                                        ({"s": {1, 2}}, "set"), ({frozenset(): 1}, "dict key"),
                                        ({"a": np.array(["x"])}, "dtype"),
                                        ({"a": np.array([object()])}, "dtype")])
def test_unsupported_values_raise_with_key_path(tmp_path, value, kind):
    with pytest.raises(UnsupportedValueError, match=kind):
        save(value, tmp_path / "bad.npz")
    assert issubclass(UnsupportedValueError, TypeError)


def test_unsupported_value_names_its_path(tmp_path):
    with pytest.raises(UnsupportedValueError, match=r"\['layers'\]\[1\]\['fn'\]"):
        save({"layers": [1, {"fn": print}]}, tmp_path / "bad.npz")


def test_plain_npz_loads_as_tensors(tmp_path):
    path = tmp_path / "plain.npz"
    np.savez(path, **{"fc.weight": np.ones((2, 2), np.float32), "bn.num_batches_tracked": np.array(4)})
    loaded = load(path)
    assert list(loaded) == ["fc.weight", "bn.num_batches_tracked"]
    assert loaded["bn.num_batches_tracked"].dtype == gs.int64


def test_refuses_non_npz_files(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(NotAGradscopeFileError, match="not a gradscope file"):
        load(path)
    assert issubclass(NotAGradscopeFileError, ValueError)
    with pytest.raises(NotAGradscopeFileError):
        load(io.BytesIO(b"PK\x03\x04 truncated"))


def test_refuses_pickled_object_arrays(tmp_path):
    path = tmp_path / "pickled.npz"
    np.savez(path, evil=np.array([{"a": 1}], dtype=object))
    with pytest.raises(NotAGradscopeFileError, match="without pickle"):
        load(path)


def test_refuses_torch_checkpoints_without_unpickling(tmp_path):
    path = tmp_path / "model.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("model/data.pkl", b"\x80\x04cos\nsystem\n(S'echo pwned'\ntR.")
        archive.writestr("model/version", b"3")
    with pytest.raises(NotAGradscopeFileError, match="PyTorch checkpoint"):
        load(path)


def test_refuses_malformed_headers(tmp_path):
    def write(header):
        buffer = io.BytesIO()
        np.savez(buffer, __gradscope__=np.frombuffer(json.dumps(header).encode(), np.uint8), a=np.ones(1))
        buffer.seek(0)
        return buffer

    with pytest.raises(NotAGradscopeFileError, match="header"):
        load(write({"format": "other", "root": None}))
    with pytest.raises(NotAGradscopeFileError, match="version"):
        load(write({"format": "gradscope", "version": 99, "root": None}))
    with pytest.raises(NotAGradscopeFileError, match="missing array"):
        load(write({"format": "gradscope", "version": 1, "root": {"tensor": "nope"}}))
    with pytest.raises(NotAGradscopeFileError, match="unknown node kind"):
        load(write({"format": "gradscope", "version": 1, "root": {"__reduce__": "os.system"}}))
    with pytest.raises(NotAGradscopeFileError, match="unhashable"):
        load(write({"format": "gradscope", "version": 1, "root": {"dict": [[{"list": []}, 1]]}}))


def test_torch_style_keyword_arguments_are_accepted(tmp_path):
    save({"a": gs.ones(1)}, tmp_path / "a.npz")
    assert load(tmp_path / "a.npz", map_location="cpu", weights_only=True)["a"].tolist() == [1.0]


# ---------------------------------------------------------------- weights exported from PyTorch
def _torch_style_models():
    """The torch-style model file, once for torch and once for gradscope (imports swapped)."""
    torch = pytest.importorskip("torch")
    source = (Path(__file__).parent / "torch_style_models.py").read_text()
    imports = "import torch\nfrom torch import nn\nimport torch.nn.functional as F\n"
    ours = {}
    exec(compile(source.replace(imports, "import gradscope as torch\nfrom gradscope import nn\n"
                                         "import gradscope.nn.functional as F\n"), "<gs>", "exec"), ours)
    theirs = {}
    exec(compile(source, "<torch>", "exec"), theirs)
    return torch, ours, theirs


@pytest.mark.parametrize("name", ["MLP", "SmallCNN", "SequenceModel", "TransformerBlock"])
def test_npz_exported_from_torch_state_dict_gives_same_outputs(tmp_path, name):
    torch, ours_ns, theirs_ns = _torch_style_models()
    theirs = theirs_ns[name]()
    if name == "SmallCNN":
        theirs.train()
        theirs(torch.randn(8, 1, 10, 10))
    theirs.eval()
    path = tmp_path / f"{name}.npz"
    np.savez(path, **{key: value.detach().numpy() for key, value in theirs.state_dict().items()})
    ours = ours_ns[name]()
    result = ours.load_state_dict(load(path))
    assert not result.missing_keys and not result.unexpected_keys
    ours.eval()
    rng = np.random.default_rng(0)
    inputs = {"MLP": lambda: rng.standard_normal((4, 20)).astype(np.float32),
              "SmallCNN": lambda: rng.standard_normal((3, 1, 10, 10)).astype(np.float32),
              "SequenceModel": lambda: rng.integers(0, 30, (3, 6)),
              "TransformerBlock": lambda: rng.integers(1, 40, (2, 8))}[name]()
    expected = theirs(torch.tensor(inputs)).detach().numpy()
    np.testing.assert_allclose(ours(gs.tensor(inputs))._data, expected, rtol=1e-4, atol=1e-5)
    if name == "SmallCNN":
        assert int(ours.bn1.num_batches_tracked) == 1 and ours.bn1.num_batches_tracked.dtype == gs.int64
    save(ours.state_dict(), tmp_path / "again.npz")
    reloaded = theirs_ns[name]()
    reloaded.load_state_dict({k: torch.from_numpy(np.array(v._data)) for k, v in load(tmp_path / "again.npz").items()})
    reloaded.eval()
    np.testing.assert_allclose(reloaded(torch.tensor(inputs)).detach().numpy(), expected, rtol=1e-6, atol=1e-7)
