"""Loading a model file leaves ``sys.path`` and ``sys.modules`` as it found them, and a folder beside
the model file that bears the name of a real package (``torch/``, ``numpy/``) never stands in for it."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradscope import engines
from gradscope.cli import cli
from gradscope.loading import ModelFileError, UserCodeError, load_model_file
from gradscope.scripts import run_script

NATIVE = """import gradscope as gs
from gradscope import nn
{imports}
model = nn.Linear(2, 1)
loss_fn = nn.MSELoss()

def batch(step):
{batch_body}
    return gs.ones(3, 2), gs.zeros(3, 1)
"""
# A package beside the model file that must never be imported in place of the real one.
IMPOSTOR = "raise ImportError('the folder beside the model file was imported instead of the real package')\n"


def native_model(folder: Path, imports: str = "", batch_body: str = "    pass") -> Path:
    path = folder / "model.py"
    path.write_text(NATIVE.format(imports=imports, batch_body=batch_body))
    return path


def modules_from(folder: Path) -> list[str]:
    """Names in ``sys.modules`` of modules whose file or package path lies in ``folder``."""
    prefix = os.path.join(os.path.realpath(folder), "")
    found = []
    for name, module in list(sys.modules.items()):
        try:
            locations = [getattr(module, "__file__", None), *list(getattr(module, "__path__", None) or ())]
        except TypeError:  # torch._classes has a __path__ that is no list of folders
            continue
        if any(isinstance(p, str) and os.path.join(os.path.realpath(p), "").startswith(prefix) for p in locations):
            found.append(name)
    return found


def test_loading_leaves_sys_path_and_sys_modules_as_found(tmp_path):
    (tmp_path / "helpers.py").write_text("SCALE = 2\n")
    path = native_model(tmp_path, imports="import helpers")
    saved_path = sys.path[:]
    workload = load_model_file(path)
    assert sys.path == saved_path
    assert modules_from(tmp_path) == []
    assert "helpers" not in sys.modules
    workload.loss(workload.batch(0)).backward()
    assert sys.path == saved_path and modules_from(tmp_path) == []


def test_a_failing_model_file_leaves_them_as_found_too(tmp_path):
    (tmp_path / "helpers.py").write_text("SCALE = 2\n")
    path = tmp_path / "model.py"
    path.write_text("import helpers\nraise ValueError('broken')\n")
    saved_path = sys.path[:]
    with pytest.raises(UserCodeError, match="broken"):
        load_model_file(path)
    assert sys.path == saved_path and modules_from(tmp_path) == []


def test_helpers_beside_the_model_are_importable_in_every_call(tmp_path):
    """The folder is on sys.path (first) whenever the file's code runs, also after loading, and a
    helper imported lazily is imported once: its state lives on between calls."""
    (tmp_path / "counter.py").write_text("calls = []\n")
    path = native_model(tmp_path, batch_body="    global seen\n    import counter\n    counter.calls.append(step)\n"
                                              "    seen = counter\n"
                                              "    assert sys.path[0] == os.path.dirname(__file__), sys.path[:2]")
    path.write_text("import os\nimport sys\n" + path.read_text())
    workload = load_model_file(path)
    for step in range(3):
        workload.batch(step)
        assert "counter" not in sys.modules
    module = sys.modules.get(workload.batch_fn.__module__)
    assert module is None
    assert workload.batch_fn.__globals__["seen"].calls == [0, 1, 2]


def test_cli_commands_leave_sys_path_and_sys_modules_as_found(tmp_path, monkeypatch):
    (tmp_path / "helpers.py").write_text("SCALE = 2\n")
    path = native_model(tmp_path, imports="import helpers")
    monkeypatch.chdir(tmp_path.parent)
    saved_path = sys.path[:]
    for command in (["inspect", str(path)], ["watch", str(path), "--steps", "2"], ["check", str(path)]):
        result = CliRunner().invoke(cli, command, catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        assert sys.path == saved_path, command
        assert modules_from(tmp_path) == [], command


def test_a_torch_folder_beside_a_native_model_does_not_become_torch(tmp_path):
    """The original fault: once a model file beside a ``torch/`` folder was loaded, ``import torch``
    found that folder as a namespace package, and ``pytest.importorskip("torch")`` stopped skipping."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "twin.py").write_text("X = 1\n")
    before = importlib.util.find_spec("torch")
    torch_before = sys.modules.get("torch")
    load_model_file(native_model(tmp_path))
    after = importlib.util.find_spec("torch")
    assert (after is None) == (before is None)
    if after is not None:
        assert after.origin == before.origin and after.origin is not None
    assert sys.modules.get("torch") is torch_before


def test_a_numpy_package_beside_the_model_does_not_shadow_numpy(tmp_path):
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text(IMPOSTOR)
    path = native_model(tmp_path, imports="import numpy as np\nSHAPE = np.zeros((2, 3)).shape")
    workload = load_model_file(path)
    assert workload.batch_fn.__globals__["SHAPE"] == (2, 3)
    assert modules_from(tmp_path) == []


def test_a_torch_package_beside_a_torch_model_does_not_shadow_torch(tmp_path):
    torch = pytest.importorskip("torch")
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(IMPOSTOR)
    path = tmp_path / "model.py"
    path.write_text("import torch\nfrom torch import nn\nmodel = nn.Linear(2, 1)\nloss_fn = nn.MSELoss()\n"
                    "inputs, targets = torch.ones(3, 2), torch.zeros(3, 1)\n")
    workload = load_model_file(path)
    assert isinstance(workload.model, torch.nn.Linear)
    assert workload.engine.name == "torch"
    assert sys.modules["torch"] is torch and modules_from(tmp_path) == []


def test_a_torch_folder_without_torch_installed_gives_the_install_hint(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as where torch is not installed
    monkeypatch.delitem(sys.modules, "gradscope.engines.torch", raising=False)
    monkeypatch.setattr(engines, "_engines", {})
    (tmp_path / "torch").mkdir()
    path = tmp_path / "model.py"
    path.write_text("import torch\nfrom torch import nn\nmodel = nn.Linear(2, 1)\n")
    saved_path = sys.path[:]
    with pytest.raises(ModelFileError, match=r"the torch engine needs PyTorch, which is not installed"):
        load_model_file(path)
    assert sys.path == saved_path and modules_from(tmp_path) == []


def test_a_script_run_leaves_its_helper_modules_behind(tmp_path, capsys):
    (tmp_path / "helpers.py").write_text("VALUE = 7\n")
    (tmp_path / "torch").mkdir()
    script = tmp_path / "train.py"
    script.write_text("import helpers\nprint(helpers.VALUE)\n")
    saved_path, main = sys.path[:], sys.modules["__main__"]
    torch_before = importlib.util.find_spec("torch")
    assert run_script(str(script)).exit_code == 0
    assert capsys.readouterr().out == "7\n"
    assert sys.path == saved_path and sys.modules["__main__"] is main
    assert modules_from(tmp_path) == []
    assert getattr(importlib.util.find_spec("torch"), "origin", None) == getattr(torch_before, "origin", None)


def test_a_module_from_the_folder_imported_before_loading_stays(tmp_path, monkeypatch):
    """Only what loading imported leaves: the program's own earlier import from that folder stays."""
    (tmp_path / "shared_helpers.py").write_text("VALUE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import shared_helpers

    try:
        load_model_file(native_model(tmp_path, imports="import shared_helpers"))
        assert sys.modules["shared_helpers"] is shared_helpers
    finally:
        sys.modules.pop("shared_helpers", None)
