"""Removable hook handles, shared by tensor, node, module and global hooks."""
from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict
from typing import Any

_ids = itertools.count()


def _dead_ref() -> None:
    """Stands for a weak reference whose hook dict is gone."""
    return None


class RemovableHandle:
    """Handle returned by every ``register_*hook`` call.

    ``remove()`` deletes the hook from every dict it was registered in; calling it twice is
    harmless, and it holds only weak references so it is safe after the owner is gone.
    Usable as a context manager: the hook is removed when the block exits, even on error.
    """

    __slots__ = ("id", "_refs", "__weakref__")

    def __init__(self, hooks_dict: OrderedDict, *extra_dicts: OrderedDict, extra_dict: Any = None) -> None:
        self.id = next(_ids)
        if extra_dict is not None:  # PyTorch's keyword: one dict or a list of them
            extra_dicts = (*extra_dicts, *(extra_dict if isinstance(extra_dict, list) else [extra_dict]))
        self._refs = (weakref.ref(hooks_dict), *map(weakref.ref, extra_dicts)) if extra_dicts \
            else (weakref.ref(hooks_dict),)

    @property
    def hooks_dict_ref(self) -> Any:
        """Weak reference to the dict the hook was registered in (PyTorch's attribute)."""
        return self._refs[0]

    @property
    def extra_dict_ref(self) -> tuple:
        """Weak references to the further dicts ``remove()`` also deletes the hook from."""
        return self._refs[1:]

    def remove(self) -> None:
        """Unregister the hook (idempotent)."""
        for ref in self._refs:
            hooks = ref()
            if hooks is not None:
                hooks.pop(self.id, None)

    def __getstate__(self) -> tuple:
        # the dicts themselves (None once gone): a deep copy of a module that keeps its handles
        # then gives handles that point at the copy's hook dicts, as in torch
        return (self.id, tuple(ref() for ref in self._refs))

    def __setstate__(self, state: tuple) -> None:
        self.id, dicts = state
        self._refs = tuple(weakref.ref(hooks) if hooks is not None else _dead_ref for hooks in dicts)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"<RemovableHandle id={self.id}>"


def add_hook(hooks: OrderedDict, fn: Any, prepend: bool = False, *extra: OrderedDict) -> RemovableHandle:
    """Store ``fn`` in ``hooks`` under a fresh handle id and return the handle."""
    handle = RemovableHandle(hooks, *extra)
    hooks[handle.id] = fn
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle
