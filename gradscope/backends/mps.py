"""``gradscope.backends.mps``: Apple's Metal backend is not available in gradscope."""
from __future__ import annotations


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False
