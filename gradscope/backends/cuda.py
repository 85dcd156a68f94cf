"""``gradscope.backends.cuda``: CUDA is not available in gradscope; ``matmul.allow_tf32`` and
similar flags can be set and do nothing."""
from __future__ import annotations

from types import SimpleNamespace

matmul = SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True,
                         allow_bf16_reduced_precision_reduction=True)


def is_built() -> bool:
    return False
