"""Neural-network building blocks with PyTorch's API: modules, layers, losses, hooks.

``functional``, ``init`` and ``utils`` are imported on first use; ``parallel`` holds ``DataParallel``.
"""
from __future__ import annotations

import importlib
from typing import Any

from gradscope.nn.modules import *  # noqa: F401,F403
from gradscope.nn.modules import module as _module_file
from gradscope.nn.modules.module import (Module, register_module_backward_hook,  # noqa: F401
                                         register_module_buffer_registration_hook,
                                         register_module_forward_hook, register_module_forward_pre_hook,
                                         register_module_full_backward_hook,
                                         register_module_full_backward_pre_hook,
                                         register_module_module_registration_hook,
                                         register_module_parameter_registration_hook)
from gradscope.nn.parameter import Buffer, Parameter, UninitializedBuffer, UninitializedParameter  # noqa: F401
from gradscope.nn import modules  # noqa: F401
from gradscope.nn.parallel import DataParallel  # noqa: F401

_LAZY = ("functional", "init", "utils", "parallel")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return importlib.import_module(f"gradscope.nn.{name}")
    raise AttributeError(f"module 'gradscope.nn' has no attribute '{name}'")
