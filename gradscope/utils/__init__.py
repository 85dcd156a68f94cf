"""Utilities shared by every layer (hook handles)."""
from gradscope.utils import hooks

__all__ = ["hooks"]
