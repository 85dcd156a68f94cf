"""``gradscope.backends.cudnn``: flags model code sets; gradscope has no cuDNN, so they do nothing."""
from __future__ import annotations

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    return False


def version() -> None:
    return None
