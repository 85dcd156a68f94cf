"""``nn.parallel``: ``DataParallel`` as a transparent wrapper (gradscope runs on one CPU device)."""
from gradscope.nn.parallel.data_parallel import DataParallel, data_parallel  # noqa: F401

__all__ = ["DataParallel", "data_parallel"]
