"""Module classes. Each file defines ``__all__``; one import line per file."""
from gradscope.nn.modules.module import Module  # noqa: F401
from gradscope.nn.modules.container import *  # noqa: F401,F403
