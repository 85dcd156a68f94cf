"""Where a module is defined in the user's code: the file and line a CI annotation points at.

A module whose class the user wrote is defined by that class (``class Encoder(nn.Module):``,
in whichever file it lives); a library layer (``nn.Linear``) by the line that builds it
(``self.fc = nn.Linear(...)`` in the class of the module that holds it, or ``add_module("fc", ...)``).
A layer inside a library container (``net.0`` of an ``nn.Sequential``) is defined where the
container is built; a layer that a user class adds under a computed name, by that class. The model
file's own lines are the last resort (a model assembled at the top level of the file:
``add_module("embed", ...)``, ``model = nn.Sequential(...)``).
"""
from __future__ import annotations

import ast
import functools
import inspect
from pathlib import Path
from typing import Any

from gradscope._tool.frames import is_user_file

Location = tuple[str, int]


class ModuleDefinitions:
    """``file, line`` of the code that defines each module of ``model``.

    Args:
        model: the root module.
        model_file: the model file, searched last (None: only the classes' own files).
    """

    def __init__(self, model: Any, model_file: str | Path | None = None) -> None:
        self.modules = dict(model.named_modules())
        self.model_file = None if model_file is None else str(model_file)

    def __call__(self, module_path: str | None) -> Location | None:
        """Where the module at ``module_path`` ("" the root) is defined, or None when not found."""
        path = module_path or ""
        parts = path.split(".") if path else []
        target = self.modules.get(path)
        if target is not None:
            own = class_definition(type(target))
            if own is not None:
                return own
        for depth in range(len(parts) - 1, -1, -1):
            holder = self.modules.get(".".join(parts[:depth]))
            if holder is None:
                continue
            built = attribute_definition(type(holder), parts[depth]) or class_definition(type(holder))
            if built is not None:  # (a user class that builds it where no line names it: that class)
                return built
        return self._in_model_file(parts)

    def _in_model_file(self, parts: list[str]) -> Location | None:
        if self.model_file is None:
            return None
        lines = _file_lines(self.model_file)
        for part in reversed(parts):
            if part in lines:
                return self.model_file, lines[part]
        if "model" in lines:
            return self.model_file, lines["model"]
        return None


def class_definition(cls: type) -> Location | None:
    """The ``class`` line of a class defined in the user's code, or None (library classes)."""
    found = _class_node(cls)
    return None if found is None else (found[0], found[1].lineno)


def attribute_definition(cls: type, attribute: str) -> Location | None:
    """The line in the user's class ``cls`` (or a user class it derives from) that sets the
    submodule ``attribute`` (``self.attribute = ...``, ``add_module("attribute", ...)``,
    ``setattr(self, "attribute", ...)``), or None."""
    for klass in cls.__mro__:
        found = _class_node(klass)
        if found is None:
            continue
        line = _assignments(found[1]).get(attribute)
        if line is not None:
            return found[0], line
    return None


def _source_file(cls: type) -> str | None:
    """The file that defines ``cls``. inspect finds it through ``sys.modules[cls.__module__]``,
    which a model file's helper module leaves once loading is done (see ``ImportScope``); the code
    of the class's own functions names the file too."""
    try:
        return inspect.getsourcefile(cls)
    except (TypeError, OSError):
        pass
    for value in vars(cls).values():
        function = getattr(value, "__func__", value)
        code = getattr(function, "__code__", None)
        if code is not None and getattr(function, "__qualname__", "").startswith(cls.__qualname__ + "."):
            return code.co_filename
    return None


def _class_node(cls: type) -> tuple[str, ast.ClassDef] | None:
    file = _source_file(cls)
    if file is None or not is_user_file(file):
        return None
    classes = [node for node in ast.walk(_tree(file) or ast.Module(body=[], type_ignores=[]))
               if isinstance(node, ast.ClassDef) and node.name == cls.__name__]
    if len(classes) > 1:
        try:
            start = inspect.getsourcelines(cls)[1]
        except (TypeError, OSError, IndexError):
            start = None
        classes = [node for node in classes if start in (node.lineno, *(d.lineno for d in node.decorator_list))] \
            or classes
    return (file, classes[0]) if classes else None


def _tree(file: str) -> ast.Module | None:
    try:
        modified = Path(file).stat().st_mtime_ns
    except OSError:
        return None
    return _parse(file, modified)


@functools.lru_cache(maxsize=64)
def _parse(file: str, modified: int) -> ast.Module | None:
    """The syntax tree of ``file`` as it was at ``modified`` (the cache key), or None."""
    try:
        return ast.parse(Path(file).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def _assignments(node: ast.AST) -> dict[str, int]:
    """``attribute -> first line`` of every submodule a class body sets on ``self``."""
    lines: dict[str, int] = {}

    def keep(name: str, line: int) -> None:
        if name not in lines or line < lines[name]:
            lines[name] = line

    for child in ast.walk(node):
        if isinstance(child, (ast.Assign, ast.AnnAssign)):
            targets = child.targets if isinstance(child, ast.Assign) else [child.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == "self":
                    keep(target.attr, child.lineno)
        elif isinstance(child, ast.Call) and child.args and isinstance(child.args[0], ast.Constant) \
                and isinstance(child.args[0].value, str):
            function = child.func
            if isinstance(function, ast.Attribute) and function.attr in ("add_module", "register_module"):
                keep(child.args[0].value, child.lineno)
        if isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id == "setattr" \
                and len(child.args) >= 2 and isinstance(child.args[1], ast.Constant) \
                and isinstance(child.args[1].value, str):
            keep(child.args[1].value, child.lineno)
    return lines


def _file_lines(file: str) -> dict[str, int]:
    """The model file's ``attribute -> line`` (as :func:`_assignments`, over the whole file) and
    ``"model" -> line`` of the first top-level assignment to ``model``."""
    tree = _tree(file)
    if tree is None:
        return {}
    lines = _assignments(tree)
    for statement in tree.body:
        if isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if any(isinstance(target, ast.Name) and target.id == "model" for target in targets):
                lines["model"] = statement.lineno
                break
    return lines
