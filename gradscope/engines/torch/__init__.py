"""The PyTorch adapter (imported only when torch is used): :class:`TorchEngine` in ``adapter``,
operation tracing in ``dispatch``, ``torch.distributed`` specifics in ``distributed``, the ``run
--nproc`` launcher in ``launch``, and every private torch API it relies on in ``private``."""
from __future__ import annotations

import torch  # noqa: F401 - first: where torch cannot be imported, neither can this package (its modules may be cached)

from gradscope.engines.torch.adapter import TorchEngine

__all__ = ["TorchEngine"]
