"""``gradscope.backends.cuda``: CUDA is not available in gradscope; ``matmul.allow_tf32`` and
similar flags can be set and do nothing, and the attention-kernel switches (``sdp_kernel``,
``enable_flash_sdp``, ...) only choose CUDA kernels, so on gradscope's CPU they select nothing."""
from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Iterator

matmul = SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True,
                         allow_bf16_reduced_precision_reduction=True)


def is_built() -> bool:
    return False


_SDP_FLAGS = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


@contextlib.contextmanager
def sdp_kernel(enable_flash: bool = True, enable_math: bool = True, enable_mem_efficient: bool = True,
               enable_cudnn: bool = True) -> Iterator[None]:
    """Choose CUDA attention kernels for the block (recorded and restored; the CPU has one kernel)."""
    previous = dict(_SDP_FLAGS)
    _SDP_FLAGS.update(flash=enable_flash, math=enable_math, mem_efficient=enable_mem_efficient, cudnn=enable_cudnn)
    try:
        yield
    finally:
        _SDP_FLAGS.update(previous)


def _switch(name: str) -> tuple:
    def enable(enabled: bool) -> None:
        _SDP_FLAGS[name] = bool(enabled)

    def enabled() -> bool:
        return _SDP_FLAGS[name]

    return enable, enabled


enable_flash_sdp, flash_sdp_enabled = _switch("flash")
enable_mem_efficient_sdp, mem_efficient_sdp_enabled = _switch("mem_efficient")
enable_math_sdp, math_sdp_enabled = _switch("math")
enable_cudnn_sdp, cudnn_sdp_enabled = _switch("cudnn")


def is_flash_attention_available() -> bool:
    return False
