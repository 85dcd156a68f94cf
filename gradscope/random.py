"""``gradscope.random``: the global generator's seeding and state, as ``torch.random``."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from gradscope.ops.creation import get_rng_state, initial_seed, manual_seed, seed, set_rng_state

__all__ = ["fork_rng", "get_rng_state", "initial_seed", "manual_seed", "seed", "set_rng_state"]


@contextlib.contextmanager
def fork_rng(devices: Any = None, enabled: bool = True, _caller: str = "fork_rng",
             _devices_kw: str = "devices", device_type: str = "cuda") -> Iterator[None]:
    """Run the block with the global generator's state restored afterwards."""
    if not enabled:
        yield
        return
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)
