"""Monitors and the operations built on them; the library API behind the CLI.

Monitors are context managers that attach through the public global module hooks and remove
every hook on exit (``GradientMonitor``, ``ForwardNonFiniteTracer``, ``BackwardNonFiniteTracer``,
``ModuleGradientClipper``). The operations return plain report records:

* ``inspect_model(workload, step=0) -> InspectReport``
* ``Watcher(workload, WatchOptions(...))``: ``.steps()`` yields ``StepRecord``s, ``.report()``
* ``replay(workload, bundle) -> WatchReport``
* ``clip_model(workload, max_value, mode, scope, steps) -> ClipReport``
* ``check_model(workload, CheckOptions(...)) -> CheckReport``
* ``RunMonitor(RunOptions(...))``: ``.attach(engine)`` while a script runs, ``.report(script)``

Names are imported on first use, so ``gradscope.monitor.records`` stays importable on its own.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GradientMonitor": "monitors", "ForwardNonFiniteTracer": "monitors", "BackwardNonFiniteTracer": "monitors",
    "ModuleGradientClipper": "clip", "clip_model": "clip",
    "inspect_model": "inspect",
    "Watcher": "watch", "WatchOptions": "watch", "replay": "watch", "localize_from_snapshot": "watch",
    "CheckOptions": "check", "check_model": "check",
    "Thresholds": "analysis", "gradient_findings": "analysis",
    "Snapshot": "snapshot", "BundleError": "snapshot",
    "Finding": "records", "InspectReport": "records", "WatchReport": "records", "ClipReport": "records",
    "CheckReport": "records", "StepRecord": "records", "NonFiniteOrigin": "records",
    "RunMonitor": "run", "RunOptions": "run", "StopRun": "run", "RunReport": "records",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gradscope.monitor' has no attribute {name!r}")
    return getattr(importlib.import_module(f"gradscope.monitor.{module}"), name)
