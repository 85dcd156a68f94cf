"""``gradscope.backends``: the backend switches model code reads or sets (``cudnn``, ``mps``,
``cuda``). None of these backends exists in gradscope; the flags are kept so that setting them
works, and ``is_available()`` says False."""
from __future__ import annotations

from gradscope.backends import cuda, cudnn, mps

__all__ = ["cuda", "cudnn", "mps"]
