"""The package's import layering (described in docs/code-map.md), checked by parsing every import."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gradscope"

# Lower rank = lower layer. A module may import its own layer and any layer below it.
RANKS = {
    "errors": 0, "_tool": 0, "utils": 0, "cuda": 0, "backends": 0, "runtime": 0, "amp": 0, "jit": 0,
    "multiprocessing": 0,
    "autograd": 1,
    "ops": 2, "sparse": 2, "linalg": 2, "random": 2, "special": 2,
    "hooks": 3,
    "nn": 4, "optim": 4, "utils.data": 4, "serialization": 4, "distributions": 4,
    "engines": 5,
    "loading": 6, "scripts": 6, "monitor": 6, "testing": 6, "debug": 6,
    "render": 7,
    "cli": 8, "__main__": 8, "_api": 9,
}
RENDER_FORBIDDEN = {"autograd", "ops", "nn", "hooks", "optim"}
# Layers that reach an engine only through gradscope/engines (they run torch models too).
ENGINE_NEUTRAL = {"loading", "monitor", "testing", "render", "cli", "debug"}


def _layer(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return "utils.data" if parts[:2] == ("utils", "data") else parts[0]


def _imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
            if node.module == "gradscope":
                found.extend((f"gradscope.{alias.name}", node.lineno) for alias in node.names)
    return found


FILES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)
ENGINES = PACKAGE / "engines"
#: The submodules of gradscope.engines (``native``, ``spec``, ``torch``, ...): private to it.
ENGINE_SUBMODULES = frozenset(path.stem if path.suffix == ".py" else path.name for path in ENGINES.iterdir()
                              if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").exists())
OUTSIDE_ENGINES = [path for path in FILES if ENGINES not in path.parents]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_only_go_downward(path: Path) -> None:
    layer = _layer(path)
    assert layer in RANKS, f"{path}: layer {layer!r} has no rank in this test"
    for module, line in _imports(path):
        top = module.split(".")[0]
        if top == "click":
            assert layer == "cli", f"{path}:{line} imports click outside gradscope/cli"
        if top == "rich":
            assert layer in ("cli", "render"), f"{path}:{line} imports rich outside render/ and cli/"
        if top == "torch":
            assert layer == "engines", f"{path}:{line} imports torch outside gradscope/engines"
        if layer == "debug":
            assert module != "gradscope", f"{path}:{line}: debug/ must not import the gradscope package itself"
        if top != "gradscope" or module == "gradscope":
            continue
        target = "utils.data" if module.startswith("gradscope.utils.data") else module.split(".")[1]
        assert target in RANKS, f"{path}:{line}: unknown layer {target!r}"
        if layer == "render":
            assert target not in RENDER_FORBIDDEN, f"{path}:{line}: render/ must not import {module}"
        if layer in ENGINE_NEUTRAL:
            assert target not in RENDER_FORBIDDEN, f"{path}:{line}: {layer} must reach the engine through " \
                f"gradscope.engines, not import {module}"
        assert RANKS[target] <= RANKS[layer], f"{path}:{line}: {layer} (rank {RANKS[layer]}) imports " \
            f"{module} (rank {RANKS[target]}): imports must only go downward"


def engine_submodule_imports(path: Path) -> list[tuple[str, int]]:
    """The imports in ``path`` that reach into a submodule of gradscope.engines: ``import
    gradscope.engines.X``, ``from gradscope.engines.X import ...``, ``from gradscope.engines import X``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.startswith("gradscope.engines.")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("gradscope.engines."):
                found.append((node.module, node.lineno))
            elif node.module == "gradscope.engines":
                found += [(f"gradscope.engines.{alias.name}", node.lineno) for alias in node.names
                          if alias.name in ENGINE_SUBMODULES]
    return found


@pytest.mark.parametrize("path", OUTSIDE_ENGINES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_engines_are_reached_only_through_the_registry(path: Path) -> None:
    """Outside gradscope/engines, only ``gradscope.engines``' public names are imported."""
    assert ENGINE_SUBMODULES >= {"native", "spec", "kernels", "torch"}  # (the scan found the package's parts)
    for module, line in engine_submodule_imports(path):
        raise AssertionError(f"{path}:{line} imports {module}: use the names gradscope.engines exports")


def _is_engine_name(node: ast.expr) -> bool:
    """``engine.name``, ``self.engine.name``, ``workload.torch_engine.name``: the attribute ``name``
    of something whose own name contains "engine"."""
    if not isinstance(node, ast.Attribute) or node.attr != "name":
        return False
    owner = node.value
    identifier = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
    return "engine" in identifier.lower()


def _is_string_constant(node: ast.expr) -> bool:
    """A str literal, or a tuple/list/set literal of them (``engine.name in ("torch", ...)``)."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_is_string_constant(element) for element in node.elts)
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def engine_name_branches(source: str, filename: str = "<source>") -> list[int]:
    """The lines where an engine's ``.name`` is compared with a string literal."""
    lines = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for left, right in zip(operands, operands[1:]):
                if (_is_engine_name(left) and _is_string_constant(right)) or \
                        (_is_string_constant(left) and _is_engine_name(right)):
                    lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("path", OUTSIDE_ENGINES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_behaviour_is_chosen_by_engine_name(path: Path) -> None:
    """Outside gradscope/engines no code branches on ``engine.name == "torch"``: it asks the
    adapter instead (comparing two engines' names, or using a name as a key, is fine)."""
    for line in engine_name_branches(path.read_text(), str(path)):
        raise AssertionError(f"{path}:{line} compares an engine's name with a string: ask the engine adapter")


@pytest.mark.parametrize("source, found", [
    ('group = engine.process_group() if engine.name == "torch" else None', True),
    ('if "torch" != self.engine.name: pass', True),
    ('if workload.engine.name in ("torch", "gradscope"): pass', True),
    ('if torch_engine.name == "torch": pass', True),
    ('if bundle.engine != engine.name: pass', False),  # an identity check between two engines
    ('keys = {engine.name: 1}', False),
    ('if module.name == "torch": pass', False),  # not an engine
    ('if engine.display == "PyTorch": pass', False),
    ('if engine.name: pass', False),
])
def test_the_engine_name_check_finds_exactly_these(source: str, found: bool) -> None:
    assert bool(engine_name_branches(source)) is found


def test_torch_is_imported_lazily() -> None:
    """A native model runs without importing torch (the adapter imports it on demand)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from gradscope.engines import engine_of, get_engine\n"
            "from gradscope import nn\n"
            "assert engine_of(nn.Linear(2, 2)) is get_engine('gradscope')\n"
            "import gradscope.monitor.watch, gradscope.cli\n"
            "print('torch' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=PACKAGE.parent)
    assert result.stdout.strip() == "False"


def test_readme_test_command_is_what_ci_runs() -> None:
    root = PACKAGE.parent
    readme = (root / "README.md").read_text().splitlines()
    marker = readme.index("<!-- test-command -->")
    command = readme[marker + 2]
    assert "pytest" in command
    assert "<!-- test-command -->" in (root / ".ci" / "run").read_text()
