"""The benchmark scripts are run by hand (``python tests/benchmarks/bench_engine.py``), never by pytest."""
from __future__ import annotations

collect_ignore_glob = ["bench_*.py", "benchlib.py"]
