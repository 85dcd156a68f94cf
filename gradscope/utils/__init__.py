"""``torch.utils`` for the import swap: hook handles (shared by every layer), ``checkpoint`` and ``data``
(datasets and loaders). The debugger's own helpers live in :mod:`gradscope._tool`."""
from gradscope.utils import checkpoint, hooks

__all__ = ["checkpoint", "hooks"]
