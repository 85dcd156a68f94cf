"""Running code once a module has been imported: how an engine is activated when a user's script
imports its library (``torch``), and only then."""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
import types
from typing import Any, Callable, Iterator


class _ImportWatcher(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` finder that finds nothing itself: it lets the other finders find
    ``name`` and wraps the loader so that ``callback`` runs after the module has executed."""

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name = name
        self.callback = callback
        self._searching = False

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name or self._searching:
            return None
        self._searching = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._searching = False
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module
        callback = self.callback

        def exec_module(module: types.ModuleType) -> None:
            execute(module)
            callback()

        loader.exec_module = exec_module
        return spec


@contextlib.contextmanager
def when_imported(name: str, callback: Callable[[], None]) -> Iterator[None]:
    """Run ``callback()`` once the top-level module ``name`` has been imported.

    Immediately if it already is; otherwise right after its first import finishes, inside the
    ``with`` block. The module is never imported here.
    """
    if name in sys.modules:
        callback()
        yield
        return
    fired = False

    def once() -> None:
        nonlocal fired
        if not fired:
            fired = True
            callback()

    watcher = _ImportWatcher(name, once)
    sys.meta_path.insert(0, watcher)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(watcher)
