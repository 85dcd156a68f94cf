"""Library error types. Every error gradscope raises on purpose derives from GradscopeError,
except where PyTorch compatibility demands a builtin type (RuntimeError, TypeError, ...)."""
from __future__ import annotations


class GradscopeError(Exception):
    """Base class of gradscope's own errors."""


class ModelError(GradscopeError):
    """The user's model file or model code could not be loaded or run."""


class ControlFlow(BaseException):
    """Raised by gradscope itself through the user's code on purpose (for example the debugger's
    ``quit``). The boundary around user code lets it pass instead of blaming the model."""
