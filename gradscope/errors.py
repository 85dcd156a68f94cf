"""Library error types. Every error gradscope raises on purpose derives from GradscopeError,
except where PyTorch compatibility demands a builtin type (RuntimeError, TypeError, ...)."""
from __future__ import annotations


class GradscopeError(Exception):
    """Base class of gradscope's own errors."""


class ModelError(GradscopeError):
    """The user's model file or model code could not be loaded or run."""
