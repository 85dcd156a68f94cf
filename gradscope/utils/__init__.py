"""Utilities shared by every layer (hook handles), ``checkpoint`` and ``data`` (datasets and loaders)."""
from gradscope.utils import checkpoint, hooks

__all__ = ["checkpoint", "hooks"]
